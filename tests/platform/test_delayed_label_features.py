"""Label features (counts and rates of labels that arrived after their delay) against the brute force:
offline through the backfill, online event by event, and never a label inside its delay."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from feature_oracle import (
    DAY,
    TS,
    WIDE_OFFSETS,
    assert_features_equal,
    backfilled,
    brute_force,
    stream_frame,
    with_label_features,
)
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from mlops.contract import DataContract
from mlops.feature_replay import replay_features
from mlops.settings import Settings

pytestmark = pytest.mark.unit


LABELLED_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]),
                                      WIDE_OFFSETS, st.integers(min_value=1, max_value=500_000).map(lambda c: c / 100),
                                      st.integers(min_value=0, max_value=1)),
                            min_size=1, max_size=30)


@pytest.fixture(scope="module")
def labelled(contract: DataContract) -> DataContract:
    return with_label_features(contract)


def labelled_frame(events: list[tuple[str, str, timedelta, float, int]], prefix: str = "") -> pd.DataFrame:
    return stream_frame([e[:4] for e in events], prefix).assign(is_fraud=[e[4] for e in events])


def test_label_features_see_the_labels_of_the_delayed_window_by_hand(labelled: DataContract, tmp_path: Path) -> None:
    half = timedelta(minutes=30)
    frame = labelled_frame([("c1", "m1", timedelta(0), 1.0, 1), ("c1", "m1", half, 1.0, 0),
                            ("c1", "m1", 2 * half, 1.0, 1), ("c1", "m1", 3 * half, 1.0, 0),
                            ("c1", "m1", 3 * half, 1.0, 1), ("c1", "m1", 7 * DAY, 1.0, 0),
                            ("c1", "m1", 30 * DAY, 1.0, 0),
                            ("c1", "m1", 30 * DAY + timedelta(microseconds=1), 1.0, 0)])
    expected = brute_force(frame, labelled)
    assert_features_equal(backfilled(frame, labelled, tmp_path), expected)
    assert_features_equal(replay_features(frame.sample(frac=1.0, random_state=2), labelled).loc[frame.index],
                          expected)
    # Rate over [t - 90 min, t - 30 min): at 1 h the 0-min event (1); at 1.5 h also the 30-min one (0).
    assert expected["customer_fraud_rate_1h"].tolist()[:5] == [0.0, 0.0, 1.0, 0.5, 0.5]
    # Count over [t - 25 h, t - 1 h): at 1 h the 0-min event lies exactly at t - delay (out), at 1.5 h it is in.
    assert expected["customer_fraud_count_1d"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # [t - 30 d, t - 7 d): at 7 d the 0-min event is exactly 7 d back (out), at 30 d exactly 30 d back (in),
    # one microsecond later out again.
    assert expected["merchant_fraud_count_23d"].tolist()[5:] == [0.0, 3.0, 2.0]
    assert expected["merchant_fraud_rate_23d"].tolist()[5:] == [0.0, 0.5, 0.4]  # the 7-day event (0) counts too


def test_transactions_without_labels_backfill_as_labels_not_delivered_as_the_service_does(
        labelled: DataContract, tmp_path: Path) -> None:
    """A file to score has no label column: its label features count no labels, as the service's do
    before any is delivered (`mlops predict` equals /predict), not an error."""
    frame = labelled_frame([("c1", "m1", n * DAY / 2, 1.0, n % 2) for n in range(80)])
    unlabelled = frame.drop(columns=["is_fraud"])
    (tmp_path / "unlabelled").mkdir()
    (tmp_path / "labelled").mkdir()
    got = backfilled(unlabelled, labelled, tmp_path / "unlabelled")
    assert "is_fraud" not in pd.read_parquet(tmp_path / "unlabelled" / "features.parquet").columns  # no stand-in
    assert_features_equal(got, replay_features(unlabelled, labelled))
    label_features = [f.name for v in labelled.feature_views for f in v.features if f.is_label]
    assert (got[label_features] == 0.0).all().all()
    assert (backfilled(frame, labelled, tmp_path / "labelled")[label_features] != 0.0).any().any()


@hypothesis_settings(max_examples=40, deadline=None)
@given(events=LABELLED_STREAMS)
def test_label_features_backfill_equals_brute_force_and_the_online_computation(
        labelled: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float, int]]) -> None:
    frame = labelled_frame(events)
    got = backfilled(frame, labelled, tmp_path_factory.mktemp("labels"))
    assert_features_equal(got, brute_force(frame, labelled))
    assert_features_equal(got, replay_features(frame.sample(frac=1.0, random_state=0), labelled).loc[frame.index])


def _flipped_within_the_delay(frame: pd.DataFrame, contract: DataContract, row: int) -> pd.DataFrame:
    """``frame`` with the label of every event at or after t - (the shortest delay) flipped, t the row's time."""
    delay = min(f.delay_delta for v in contract.feature_views for f in v.features if f.is_label)
    recent = frame[TS] >= frame[TS].iloc[row] - delay
    return frame.assign(is_fraud=frame["is_fraud"].where(~recent, 1 - frame["is_fraud"]))


@hypothesis_settings(max_examples=25, deadline=None)
@given(events=LABELLED_STREAMS, pick=st.integers(min_value=0, max_value=29))
def test_labels_inside_the_delay_never_change_a_rows_features(
        labelled: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float, int]], pick: int) -> None:
    """Labels a team could not know at t (events in [t - delay, t), and t itself) leave the row at t alone."""
    frame = labelled_frame(events)
    row = pick % len(frame)
    flipped = _flipped_within_the_delay(frame, labelled, row)
    folder = tmp_path_factory.mktemp("leak")
    before, after = backfilled(frame, labelled, folder), backfilled(flipped, labelled, folder)
    assert_features_equal(after.iloc[[row]], before.iloc[[row]])
    assert_features_equal(replay_features(flipped, labelled).iloc[[row]], before.iloc[[row]])


def test_the_training_table_never_sees_labels_inside_the_delay(labelled: DataContract, tmp_path: Path) -> None:
    """Flipping the labels of the newest events (within the shortest delay of the last one) changes
    those rows' own labels in the train/validation/test files and nothing else."""
    from pipelines.steps.preprocess import preprocess

    rng = random.Random(5)
    events = [(rng.choice(["c1", "c2"]), rng.choice(["m1", "m2"]), timedelta(minutes=30 * rng.randint(0, 200)),
               float(rng.randint(1, 500)), rng.randint(0, 1)) for _ in range(60)]
    frame = labelled_frame(events)
    flipped = _flipped_within_the_delay(frame, labelled, int(frame[TS].argmax()))
    assert (flipped["is_fraud"] != frame["is_fraud"]).any()
    tables = []
    for name, data in (("original", frame), ("flipped", flipped)):
        data.to_parquet(tmp_path / f"{name}.parquet", index=False)
        preprocess(tmp_path / f"{name}.parquet", labelled, Settings(home=tmp_path / name), tmp_path / name / "splits")
        tables.append(pd.concat([pd.read_parquet(tmp_path / name / "splits" / f"{s}.parquet")
                                 for s in ("train", "validation", "test")]).set_index("transaction_id").sort_index())
    original, changed = tables
    assert_features_equal(changed[labelled.feature_names], original[labelled.feature_names])
    assert_features_equal(original[labelled.feature_names],
                          brute_force(frame, labelled).set_axis(frame["transaction_id"]).sort_index())
    assert original[labelled.feature_names[-8:]].to_numpy().any()  # the label features are not all zero
