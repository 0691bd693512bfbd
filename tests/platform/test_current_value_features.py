"""Current-value features (the event's value against its entity's window: ratio to the mean, z-score)
against the brute force in exact arithmetic, offline, online and through the skew check."""

from __future__ import annotations

import math
import random
import uuid
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from feature_oracle import (
    BASE,
    CURRENT_VALUE_FEATURES,
    DAY,
    TEXT_FEATURES,
    TS,
    WIDE_OFFSETS,
    assert_features_equal,
    assert_scores_equal,
    backfilled,
    brute_force,
    log_served,
    served_features,
    stream_frame,
    with_current_value_features,
    with_label_features,
    with_text_features,
)
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from feature_repo.store import FeastOnlineRows, publish_features
from mlops.contract import DataContract
from mlops.errors import InputError
from mlops.feature_replay import replay_features
from mlops.feature_store import offline_features
from mlops.features import (
    compute_features,
    current_value_score,
)
from mlops.online_features import OnlineFeatures
from mlops.settings import Settings

pytestmark = pytest.mark.unit


_AMOUNTS = st.one_of(st.sampled_from([0.5, 2.5, 40.0]),
                     st.integers(min_value=1, max_value=500_000).map(lambda c: c / 100))
CURRENT_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]),
                                     WIDE_OFFSETS, _AMOUNTS), min_size=1, max_size=30)


@pytest.fixture(scope="module")
def scored(contract: DataContract) -> DataContract:
    return with_current_value_features(contract)


def test_current_value_features_by_hand(scored: DataContract, tmp_path: Path) -> None:
    half = timedelta(minutes=30)
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", half, 20.0),
                          ("c1", "m1", 2 * half, 30.0), ("c1", "m1", 2 * half, 5.0),  # a tie: neither sees the other
                          ("c2", "m2", timedelta(0), 5.0), ("c2", "m2", half, 5.0), ("c2", "m2", 2 * half, 7.0),
                          ("c3", "m2", 3 * half, 0.0), ("c3", "m2", 4 * half, 0.0), ("c3", "m2", 5 * half, 3.0),
                          ("c1", "m1", 2 * half + DAY, 1.0)])  # exactly 24 h after the tie: only the tie is in 24 h
    expected = brute_force(frame, scored)
    assert_features_equal(backfilled(frame, scored, tmp_path), expected)
    assert_features_equal(replay_features(frame.sample(frac=1.0, random_state=3), scored).loc[frame.index], expected)
    # An empty window's ratio is 1; a window of zeros too; 30 against {10, 20}: twice the mean, 3 std above.
    assert expected["customer_amount_ratio_24h"].tolist() == [1.0, 2.0, 2.0, 1 / 3, 1.0, 1.0, 1.4, 1.0, 1.0, 1.0,
                                                               1 / 17.5]
    assert expected["customer_amount_zscore_7d"].tolist()[:7] == [0.0, 0.0, 3.0, -2.0, 0.0, 0.0, 0.0]  # {5, 5}: 0
    # 1 at 24 h 1 min against {10, 20, 30, 5}: mean 16.25, population std sqrt(92.1875).
    assert expected["customer_amount_zscore_7d"].iloc[-1] == pytest.approx(-15.25 / math.sqrt(92.1875), abs=1e-12)
    # m2's 1 h window [t - 1h, t): {5, 5} at 1 h (equal: 0); 0 at 1.5 h against {5, 7} (mean 6, std 1);
    # 0 at 2 h against {7, 0} (mean 3.5, std 3.5); 3 at 2.5 h against {0, 0} (equal: 0).
    assert expected["merchant_amount_zscore_1h"].tolist()[4:10] == [0.0, 0.0, 0.0, -6.0, -1.0, 0.0]


@hypothesis_settings(max_examples=40, deadline=None)
@given(events=CURRENT_STREAMS)
def test_current_value_features_backfill_equals_brute_force_and_the_online_computation(
        scored: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float]]) -> None:
    frame = stream_frame(events)
    got = backfilled(frame, scored, tmp_path_factory.mktemp("current"))
    assert_scores_equal(got, brute_force(frame, scored))
    assert_scores_equal(got, replay_features(frame.sample(frac=1.0, random_state=0), scored).loc[frame.index])


@pytest.fixture(scope="module")
def scored_online(scored: DataContract, tmp_path_factory: pytest.TempPathFactory) -> OnlineFeatures:
    settings = Settings(home=tmp_path_factory.mktemp("scored-online"))
    seed = stream_frame([("seed", "seed", timedelta(0), 1.0)])
    return OnlineFeatures(FeastOnlineRows(publish_features(seed, scored, settings)), scored)


@hypothesis_settings(max_examples=25, deadline=None)
@given(events=CURRENT_STREAMS, seed=st.integers(0, 2**16))
def test_current_value_features_through_the_online_store_match_brute_force(
        scored: DataContract, scored_online: OnlineFeatures, events: list[tuple[str, str, timedelta, float]],
        seed: int) -> None:
    """Requests in time order (ties in random order): the request's own amount against the stored history."""
    frame = stream_frame(events, prefix=f"{uuid.uuid4().hex[:8]}-")
    order = sorted(range(len(frame)), key=lambda i: (frame[TS].iloc[i], random.Random(seed + i).random()))
    served = {i: served_features(scored_online, scored, frame.iloc[i]) for i in order}
    got = pd.DataFrame([served[i] for i in range(len(frame))], index=frame.index)
    assert_scores_equal(got, brute_force(frame, scored))


def test_current_value_features_need_the_current_value(scored: DataContract) -> None:
    with pytest.raises(ValueError, match="compares the current value of 'amount'"):
        compute_features(scored, {}, BASE)
    empty = compute_features(scored, {}, BASE, {"amount": 12.5})
    assert [empty[f["name"]] for fs in CURRENT_VALUE_FEATURES.values() for f in fs] == [1.0, 0.0, 0.0, 1.0]


def test_offline_features_at_a_new_moment_compare_the_rows_own_value(scored: DataContract, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", timedelta(minutes=30), 20.0)])
    publish_features(frame, scored, settings)
    asked = frame.iloc[1:].assign(transaction_id="new", amount=45.0, **{TS: frame[TS].iloc[1] + timedelta(minutes=1)})
    got = offline_features(settings, scored, asked)
    expected = brute_force(pd.concat([frame, asked], ignore_index=True), scored).iloc[-1:].set_axis(asked.index)
    assert_features_equal(got[scored.feature_names], expected)
    assert got["customer_amount_ratio_24h"].iloc[0] == 3.0  # 45 against {10, 20}
    with pytest.raises(InputError, match="no column\\(s\\) amount"):
        offline_features(settings, scored, asked.drop(columns="amount"))


def test_zscore_of_nearly_equal_large_values_has_no_cancellation(scored: DataContract, tmp_path: Path) -> None:
    """Values of 50,000 a cent or two apart: the naive E[x^2] - E[x]^2 loses the variance's digits
    (~1e-4 against squares of 2.5e9); the two-pass and var_pop agree with exact arithmetic up to the
    rounding of the mean itself (ulp(50,000) / std, ~1e-10 of a z-score of 1)."""
    rng = random.Random(7)
    events = [("c1", "m1", timedelta(minutes=rng.randint(0, 600)), 50_000 + rng.randint(-2, 2) / 100)
              for _ in range(40)]
    frame = stream_frame(events)
    expected = brute_force(frame, scored)
    assert_scores_equal(backfilled(frame, scored, tmp_path), expected)
    assert_scores_equal(replay_features(frame, scored), expected)
    assert expected["customer_amount_zscore_7d"].abs().max() > 1.0  # the z-scores are not all 0
    window = [float(a) for a in frame["amount"].iloc[:20]]
    naive = math.fsum(x * x for x in window) / 20 - (math.fsum(window) / 20) ** 2
    exact = float(sum(((Fraction(x) - sum(map(Fraction, window)) / 20) ** 2 for x in window), Fraction(0)) / 20)
    assert abs(naive - exact) > 1e-3 * exact  # what the naive formula would have served


def test_zscore_variance_of_values_one_ulp_apart_is_the_exact_one() -> None:
    """The window's mean 1 + 2/3 ulp rounds to 1 + 1 ulp, so the deviations from it do not sum to 0:
    without the two-pass correction (their sum squared over n) the variance would be 1.5 times the
    exact one. The numerator is the value's distance from the window's (rounded) mean."""
    ulp = math.ulp(1.0)
    window = [1.0, 1.0 + ulp, 1.0 + ulp]
    exact = [Fraction(x) for x in window]
    variance = float(sum(((x - sum(exact, Fraction(0)) / 3) ** 2 for x in exact), Fraction(0)) / 3)
    mean = math.fsum(window) / 3
    assert mean == 1.0 + ulp
    for value in (1.0 + 4 * ulp, 1.0):
        expected = (value - mean) / math.sqrt(variance)
        assert current_value_score("zscore", value, window) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("family", ["current", "paired"])
def test_the_skew_check_compares_current_value_features_with_the_logged_inputs(
        family: str, contract: DataContract, tmp_path: Path) -> None:
    """Offline features at a logged prediction take its own amount (and channel) from the logged
    inputs, its merchant from the logged entities."""
    from mlops.feature_skew import check_skew

    scored = with_current_value_features(contract) if family == "current" else with_text_features(contract)
    settings = Settings(home=tmp_path)
    rng = random.Random(11)
    frame = stream_frame([(rng.choice(["c1", "c2"]), rng.choice(["m1", "m2"]), timedelta(minutes=rng.randint(0, 300)),
                           rng.randint(1, 9_999) / 100) for _ in range(30)])
    frame["channel"] = [rng.choice(["pos", "online"]) for _ in range(30)]
    publish_features(frame, scored, settings)
    served = replay_features(frame, scored)
    log_served(settings, frame, served, ["amount", "channel"])
    report = check_skew(settings, scored, sample=30, tolerance=1e-9)
    assert (report.compared, report.differing) == (30, 0), report
    new = [f["name"] for fs in (CURRENT_VALUE_FEATURES if family == "current" else TEXT_FEATURES).values() for f in fs]
    assert served[new].nunique().min() > 1  # each compared feature varies


def test_the_skew_check_reports_late_labels_apart_from_skew(contract: DataContract, tmp_path: Path) -> None:
    """Served before any label arrived, the label features are 0 online and not offline: reported apart,
    not as skew; a value feature the service got wrong is still skew."""
    from mlops.feature_skew import check_skew

    labelled = with_label_features(contract)
    settings = Settings(home=tmp_path)
    rng = random.Random(5)
    frame = stream_frame([(rng.choice(["c1", "c2"]), rng.choice(["m1", "m2"]), timedelta(hours=rng.randint(0, 400)),
                           rng.randint(1, 9_999) / 100) for _ in range(40)])
    frame["is_fraud"] = [1] * 20 + [0] * 20
    publish_features(frame, labelled, settings)
    served = replay_features(frame.drop(columns="is_fraud"), labelled)  # no label delivered yet
    served.loc[served.index[-1], "customer_txn_count_1h"] += 1  # one prediction served a wrong count
    log_served(settings, frame, served, ["amount"])
    offline = replay_features(frame, labelled)
    names = [f.name for v in labelled.feature_views for f in v.features if f.is_label]
    late = int((offline[names] - served[names]).abs().gt(1e-9).any(axis=1).sum())
    assert late > 0
    report = check_skew(settings, labelled, sample=40, tolerance=1e-9)
    assert (report.compared, report.differing, report.label_features_differing) == (40, 1, late), report
    assert report.worst_feature == "customer_txn_count_1h"
