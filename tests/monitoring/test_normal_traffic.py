"""Acceptance 3 of issue 31: no level on normal traffic. A model trained as the pipeline trains it
(it reads the hour and the weekday), its reference built from the test split as evaluate builds it,
and the generator's traffic after the training days in windows of 1 hour to 3 days: normal traffic
is INFO in every window, the score tests included; each drift scenario is flagged on its own inputs.
The first hour holds a fraud burst (one card, six foreign transactions): its country mix moves for
real, and only because the chi-squared counts each card once (``cluster``) is that not "significant"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from served_traffic import TrainedTraffic

from mlops.contract import DataContract
from mlops.data.generator import Scenario
from mlops.reference_profile import ReferenceProfile
from monitoring.drift import CONFIDENT_SHARE, PROBABILITY, TOP_SCORE_SHARE, compute_drift

pytestmark = pytest.mark.integration

WINDOWS = {"1h": pd.Timedelta(hours=1), "6h": pd.Timedelta(hours=6), "1d": pd.Timedelta(days=1),
           "3d": pd.Timedelta(days=3)}
SCORE_TESTS = (PROBABILITY, CONFIDENT_SHARE, TOP_SCORE_SHARE)
AMOUNTS = {"amount", "customer_amount_mean_7d", "customer_amount_max_24h", "customer_amount_sum_24h",
           "merchant_amount_mean_7d"}
# What each scenario moves: its inputs, the window features computed from them, and the score.
OWN: dict[Scenario, set[str]] = {
    "amount_inflation": AMOUNTS | set(SCORE_TESTS),
    "online_shift": {"channel", *SCORE_TESTS},
    "fraud_surge": AMOUNTS | {"customer_txn_count_1h", "country", "channel", "merchant_category", *SCORE_TESTS},
    "new_countries": {"country", *SCORE_TESTS},
    "new_merchant_category": {"merchant_category", *SCORE_TESTS},
}
Model = tuple[Callable[[pd.DataFrame], np.ndarray], ReferenceProfile]
CARD = "customer_id"  # the fraud contract's first entity key, as the drift job clusters


@pytest.fixture(scope="module")
def generated(contract: DataContract) -> TrainedTraffic:
    return TrainedTraffic(contract)


@pytest.fixture(scope="module")
def normal(generated: TrainedTraffic) -> pd.DataFrame:
    return generated.run("none")


@pytest.fixture(scope="module")
def model(generated: TrainedTraffic, normal: pd.DataFrame) -> Model:
    return generated.train(normal)


@pytest.mark.parametrize("size", WINDOWS)
def test_normal_traffic_after_training_is_info_at_every_window(size: str, generated: TrainedTraffic,
                                                                normal: pd.DataFrame, model: Model) -> None:
    scores, reference = model
    window = generated.after(normal, scores, WINDOWS[size])
    report = compute_drift(window, reference, cluster=CARD)
    flagged = [(f.feature, f.score, f.note) for f in report.flagged()]
    assert report.level == "INFO", flagged
    assert not {f.feature for f in report.flagged()} & set(SCORE_TESTS), flagged
    for name in SCORE_TESTS:
        feature = report.feature(name)
        if WINDOWS[size] < pd.Timedelta(days=1):  # the score's minimum window: one whole day
            assert feature.note == "not judged: the window covers less than the score's 24h period"
        else:
            assert 0 < feature.rows <= len(window)
            assert feature.score is not None


def test_a_part_days_scores_differ_from_the_whole_days(generated: TrainedTraffic, normal: pd.DataFrame,
                                                       model: Model) -> None:
    """Why the score needs whole days: the trained model's legitimate traffic scores with the hour."""
    scores, _ = model
    day = generated.after(normal, scores, WINDOWS["1d"])
    legit = day[day[generated.contract.label_column] == 0]
    logit = pd.Series(np.log(legit["probability"] / (1 - legit["probability"])), index=legit.index)
    by_hour = logit.groupby(legit["event_timestamp"].dt.hour).median()
    assert by_hour.max() - by_hour.min() > 0.3


@pytest.mark.parametrize("scenario", OWN)
def test_each_scenario_is_flagged_on_its_own_inputs_at_every_window(scenario: Scenario, generated: TrainedTraffic,
                                                                    model: Model) -> None:
    scores, reference = model
    shifted = generated.run(scenario)
    for size, span in WINDOWS.items():
        report = compute_drift(generated.after(shifted, scores, span), reference, cluster=CARD)
        flagged = {f.feature for f in report.flagged()}
        assert report.level in ("WARNING", "CRITICAL"), (scenario, size)
        assert flagged & OWN[scenario] - set(SCORE_TESTS), (scenario, size, flagged)
        assert flagged <= OWN[scenario], (scenario, size, flagged - OWN[scenario])


def test_the_first_hours_burst_is_significant_counted_by_rows_not_by_cards(generated: TrainedTraffic,
                                                                          normal: pd.DataFrame, model: Model) -> None:
    """Why the categorical test counts cards: the same hour, its rows taken as independent draws."""
    scores, reference = model
    window = generated.after(normal, scores, WINDOWS["1h"])
    assert window.groupby(CARD).size().max() >= 4  # the burst
    by_rows, by_cards = (compute_drift(window, reference, cluster=cluster).feature("country")
                         for cluster in (None, CARD))
    assert by_rows.level != "INFO"
    assert by_rows.p_value is not None
    assert by_rows.p_value < 1e-6
    assert by_cards.level == "INFO"
    assert by_cards.p_value is not None
    assert by_cards.p_value > 0.01
    assert by_rows.psi == by_cards.psi  # the level's size still counts rows
