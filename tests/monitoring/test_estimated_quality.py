"""Quality estimated from calibrated probabilities, before labels: the expected counts, the intervals'
coverage of the realized metrics, and the levels a broken model raises against its reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mlops.reference_profile import ReferenceProfile
from mlops.score_map import fit_score_map
from monitoring.estimated_quality import (
    EstimatedQuality,
    EstimateThresholds,
    estimate_quality,
    expected_counts,
    judge_estimate,
    reference_estimate,
)
from monitoring.labels import average_precision

if TYPE_CHECKING:
    from served_traffic import Traffic

import pytest

pytestmark = pytest.mark.integration

THRESHOLD = 0.5  # the monitoring fixtures' served threshold (their logged decisions)


def _realized(labels: np.ndarray, probabilities: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    tp = int(np.sum(labels & predicted))
    return {"precision": tp / max(int(predicted.sum()), 1), "recall": tp / max(int(labels.sum()), 1),
            "f1": 2 * tp / max(int(predicted.sum() + labels.sum()), 1),
            "pr_auc": average_precision(labels.astype("int64"), probabilities)}


@settings(max_examples=40, deadline=None)
@given(arrays("float64", st.integers(1, 40), elements=st.floats(0, 1)), st.integers(0, 2**32 - 1))
def test_expected_counts_are_the_mean_of_simulated_label_draws(probabilities: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    predicted = rng.random(probabilities.size) < 0.5
    draws = rng.random((4000, probabilities.size)) < probabilities
    simulated = [np.sum(draws & predicted, axis=1), np.sum(~draws & predicted, axis=1), np.sum(draws & ~predicted,
                                                                                                axis=1)]
    variance = probabilities * (1 - probabilities)
    variances = [variance[predicted].sum(), variance[predicted].sum(), variance[~predicted].sum()]
    for expected, drawn, spread in zip(expected_counts(probabilities, predicted), simulated, variances, strict=True):
        # Within 5 standard errors of the simulated mean (exact variance: a near-certain p rarely flips).
        assert abs(expected - drawn.mean()) <= 5 * np.sqrt(spread / len(drawn)) + 1e-9


def test_realized_quality_falls_in_the_interval_on_calibrated_traffic(traffic: Traffic) -> None:
    """Acceptance 1: 20 windows of 10,000 predictions scored like the generator's traffic, labels drawn
    from the probabilities (a calibrated model): the realized F1 and precision inside the 95 % interval
    in at least 18 windows, the mean absolute error at most 0.03."""
    scores = traffic("none")["probability"].to_numpy()
    rng = np.random.default_rng(7)
    inside = {"precision": 0, "f1": 0, "recall": 0, "pr_auc": 0}
    errors: dict[str, list[float]] = {name: [] for name in inside}
    for _ in range(20):
        probabilities = rng.choice(scores, 10_000)
        labels = rng.random(probabilities.size) < probabilities
        predicted = probabilities >= THRESHOLD
        estimate = estimate_quality(probabilities, predicted)
        for name, value in _realized(labels, probabilities, predicted).items():
            interval = estimate.metric(name)
            inside[name] += interval.holds(value)
            errors[name].append(abs(interval.estimate - value))
    assert inside["f1"] >= 18
    assert inside["precision"] >= 18
    assert np.mean(errors["f1"]) <= 0.03
    assert np.mean(errors["precision"]) <= 0.03
    # Recall and PR-AUC come with the same promise, checked more loosely.
    assert inside["recall"] >= 16
    assert inside["pr_auc"] >= 16


def _under_confident(probabilities: np.ndarray) -> np.ndarray:
    """Served scores of a model calibrated below 0.5 and under-confident above it (half the log-odds),
    as the demo's model is where it flags: 0.9 served as 0.75."""
    logit = np.log(probabilities / (1 - probabilities))
    served: np.ndarray = 1 / (1 + np.exp(-np.where(logit > 0, logit / 2, logit)))
    return served


def test_the_score_map_corrects_an_under_confident_model(traffic: Traffic) -> None:
    """The labels follow the fixtures' probabilities, the service logs them under-confident above 0.5.
    Read as served, the estimated precision misses in most windows. Through a score map fitted on a
    labelled reference, realized F1 and precision fall inside the interval in at least 90 % of the
    windows and the mean absolute error is at most 0.03: five references of 20,000 rows (a map is
    itself a draw: its error is shared by every window it reads) and 20 windows of 20,000 each (the
    fixtures flag 1 % of the traffic, the demo's model 2 %)."""
    scores = np.clip(traffic("none")["probability"].to_numpy(), 1e-6, 1 - 1e-6)
    inside = {"served": {"precision": 0, "f1": 0}, "mapped": {"precision": 0, "f1": 0}}
    errors: dict[str, list[float]] = {"precision": [], "f1": []}
    for seed in range(5):
        rng = np.random.default_rng(seed)
        truth = rng.choice(scores, 20_000)
        score_map = fit_score_map(_under_confident(truth), rng.random(truth.size) < truth)
        assert score_map is not None
        for _ in range(20):
            true_p = rng.choice(scores, 20_000)
            labels = rng.random(true_p.size) < true_p
            served = _under_confident(true_p)
            predicted = served >= THRESHOLD
            realized = _realized(labels, served, predicted)
            for how, estimate in (("served", estimate_quality(served, predicted)),
                                  ("mapped", estimate_quality(served, predicted, score_map=score_map))):
                for name in ("precision", "f1"):
                    inside[how][name] += estimate.metric(name).holds(realized[name])
                    if how == "mapped":
                        errors[name].append(abs(estimate.metric(name).estimate - realized[name]))
    assert inside["served"]["precision"] <= 50, inside
    assert inside["mapped"]["precision"] >= 90, inside
    assert inside["mapped"]["f1"] >= 90, inside
    assert np.mean(errors["precision"]) <= 0.03
    assert np.mean(errors["f1"]) <= 0.03


def test_intervals_narrow_with_the_window() -> None:
    rng = np.random.default_rng(3)
    probabilities = 1 / (1 + np.exp(-rng.normal(-4, 2.5, 100_000)))
    small = estimate_quality(probabilities[:2_000], probabilities[:2_000] >= THRESHOLD)
    large = estimate_quality(probabilities, probabilities >= THRESHOLD)
    for name in ("precision", "recall", "f1", "pr_auc"):
        assert large.metric(name).high - large.metric(name).low < small.metric(name).high - small.metric(name).low
        assert large.metric(name).low <= large.metric(name).estimate <= large.metric(name).high


def _zeroed(traffic: Traffic, feature: str) -> np.ndarray:
    """The live half's probabilities when the service sends ``feature`` as 0: the model breaks, the
    inputs barely move (most customers had no other transaction in the hour anyway)."""
    from served_traffic import score

    live = traffic("none").iloc[len(traffic("none")) // 2:].copy()
    live[feature] = 0
    return score(live)


def test_a_zeroed_feature_lowers_the_estimate_and_raises_a_level(traffic: Traffic, reference: ReferenceProfile) -> None:
    profile = reference.model_copy(update={"threshold": THRESHOLD})
    expected = reference_estimate(profile)
    assert expected is not None
    limits = EstimateThresholds()
    normal = traffic("none")["probability"].to_numpy()[len(traffic("none")) // 2:]
    broken = _zeroed(traffic, "customer_txn_count_1h")
    judged = {}
    for name, probabilities in (("normal", normal), ("broken", broken)):
        estimated = EstimatedQuality(model_name="m", model_version="1", role="champion", reference=expected,
                                     estimate=estimate_quality(probabilities, probabilities >= THRESHOLD,
                                                               score_map=profile.score_map))
        judged[name] = judge_estimate(estimated, limits)
    assert judged["normal"].level == "INFO"
    assert judged["broken"].level in ("WARNING", "CRITICAL")
    assert (judged["broken"].drop("f1") or 0) >= limits.drop_warning
    assert "estimated f1" in judged["broken"].note


def test_no_reference_without_a_threshold_and_no_level_when_unreliable(traffic: Traffic,
                                                                       reference: ReferenceProfile) -> None:
    profile = reference.model_copy(update={"threshold": THRESHOLD})
    assert reference_estimate(profile.model_copy(update={"threshold": None})) is None
    broken = _zeroed(traffic, "customer_txn_count_1h")
    estimated = EstimatedQuality(model_name="m", model_version="1", role="champion",
                                 reference=reference_estimate(profile),
                                 estimate=estimate_quality(broken, broken >= THRESHOLD))
    distrusted = judge_estimate(estimated, EstimateThresholds(), unreliable="ECE 0.120 > 0.05")
    assert (distrusted.level, distrusted.reliable) == ("INFO", False)
    assert distrusted.note == "estimate unreliable: ECE 0.120 > 0.05"
    unreferenced = judge_estimate(estimated.model_copy(update={"reference": None}), EstimateThresholds())
    assert unreferenced.level == "INFO"
    assert "predates its recorded threshold" in unreferenced.note
