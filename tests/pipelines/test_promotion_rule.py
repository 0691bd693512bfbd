"""The promotion rule's edges on hand-made scores: the lift floor, the threshold compare, the margin
against the interval's lower bound, missing production, and the reason a model card quotes.

test_promotion.py shows the rule on trained models; these run in milliseconds, so `make mutation`
runs them against every mutant of pipelines/steps/promotion.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import f1_score

from pipelines.steps.promotion import PromotionRule, decide, f1_from_counts

pytestmark = pytest.mark.unit

# 100 rows, 20 of them positive: a resample without a positive has probability 0.8**100.
LABELS = np.array([1] * 20 + [0] * 80)
FLAG_POSITIVES = np.where(LABELS == 1, 0.5, 0.1)  # exactly at a 0.5 threshold on every positive
FLAG_NONE = np.full(LABELS.size, 0.1)
BASELINE = "PR-AUC 0.4000 is 2.00x the base rate 0.2000 (floor 2.00x)"


def _noisy() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels, a candidate and a production model: an F1 gain of about 0.2, its interval about [0.02, 0.41]."""
    rng = np.random.default_rng(3)
    labels = (rng.random(400) < 0.1).astype(int)
    candidate = np.where(rng.random(400) < np.where(labels == 1, 0.9, 0.04), 0.9, 0.1)
    production = np.where(rng.random(400) < np.where(labels == 1, 0.5, 0.04), 0.9, 0.1)
    return labels, candidate, production


def test_the_lift_floor_is_inclusive() -> None:
    rule = PromotionRule(min_pr_auc_lift=2.0)
    at_floor = decide(LABELS, FLAG_POSITIVES, 0.5, 0.4, None, None, rule)  # 0.4 / 0.2 = 2.0 exactly
    below = decide(LABELS, FLAG_POSITIVES, 0.5, 0.39, None, None, rule)
    assert at_floor[:2] == ("promote", f"no model in production yet; {BASELINE}")
    assert at_floor[2].model_dump() == {"rows": 100, "base_rate": 0.2, "pr_auc_lift": 2.0, "f1_gain": None,
                                        "f1_gain_low": None, "f1_gain_high": None}
    assert below[0] == "reject"
    assert below[1] == ("PR-AUC 0.3900 is 1.95x the base rate 0.2000 (floor 2.00x): "
                        "it ranks no better than a constant score")
    assert below[2].pr_auc_lift == pytest.approx(1.95)


@pytest.mark.parametrize(("labels", "pr_auc"), [(np.zeros(10, dtype=int), 0.5), (np.array([], dtype=int), 0.5),
                                            (LABELS, float("nan")), (LABELS, float("inf"))],
                         ids=["no-positives", "no-rows", "nan-pr-auc", "infinite-pr-auc"])
def test_without_a_base_rate_or_a_finite_pr_auc_the_lift_is_zero(labels: np.ndarray, pr_auc: float) -> None:
    scores = np.full(labels.size, 0.1)
    decision, _, evidence = decide(labels, scores, 0.5, pr_auc, None, None, PromotionRule(min_pr_auc_lift=1.0))
    assert decision == "reject"
    assert evidence.pr_auc_lift == 0.0
    assert evidence.rows == labels.size
    assert evidence.base_rate == (0.2 if labels is LABELS else 0.0)


@pytest.mark.parametrize(("production_proba", "production_threshold"), [(None, 0.5), (FLAG_POSITIVES, None)])
def test_production_without_scores_or_a_threshold_is_no_production(
        production_proba: np.ndarray | None, production_threshold: float | None) -> None:
    decision, reason, evidence = decide(LABELS, FLAG_POSITIVES, 0.5, 0.4, production_proba, production_threshold,
                                        PromotionRule())
    assert (decision, reason) == ("promote", f"no model in production yet; {BASELINE}")
    assert evidence.f1_gain is None


def test_a_score_at_the_candidates_threshold_is_flagged_and_a_gain_at_the_margin_promotes() -> None:
    # Candidate flags every positive (at its threshold), production none: F1 1 vs 0 in every resample.
    decision, reason, evidence = decide(LABELS, FLAG_POSITIVES, 0.5, 0.4, FLAG_NONE, 0.5, PromotionRule(margin=1.0))
    assert decision == "promote"
    assert reason == (f"{BASELINE}; F1 gain over production +1.0000, 95% paired-bootstrap interval "
                      "[+1.0000, +1.0000] over 100 rows (2,000 resamples): lower bound >= margin 1.0")
    assert (evidence.f1_gain, evidence.f1_gain_low, evidence.f1_gain_high) == (1.0, 1.0, 1.0)


def test_a_score_at_productions_threshold_is_flagged() -> None:
    decision, reason, evidence = decide(LABELS, FLAG_NONE, 0.5, 0.4, FLAG_POSITIVES, 0.5, PromotionRule(margin=0.0))
    assert decision == "reject"
    assert reason == (f"{BASELINE}; F1 gain over production -1.0000, 95% paired-bootstrap interval "
                      "[-1.0000, -1.0000] over 100 rows (2,000 resamples): lower bound below margin 0.0")
    assert (evidence.f1_gain, evidence.f1_gain_low, evidence.f1_gain_high) == (-1.0, -1.0, -1.0)


def test_the_margin_is_compared_with_the_lower_bound_inclusively() -> None:
    labels, candidate, production = _noisy()
    rule = PromotionRule(min_pr_auc_lift=1.0, resamples=500)
    _, _, evidence = decide(labels, candidate, 0.5, 0.5, production, 0.5, rule)
    assert evidence.f1_gain == pytest.approx(f1_score(labels, candidate >= 0.5) - f1_score(labels, production >= 0.5))
    low, point, high = evidence.f1_gain_low, evidence.f1_gain, evidence.f1_gain_high
    assert low is not None
    assert point is not None
    assert high is not None
    assert 0.0 < low < point < high

    def decision(margin: float) -> str:
        return decide(labels, candidate, 0.5, 0.5, production, 0.5, rule.model_copy(update={"margin": margin}))[0]

    assert decision(low) == "promote"
    assert decision((low + point) / 2) == "reject"  # the point estimate clears it; the lower bound does not
    assert decision((point + high) / 2) == "reject"


def test_the_interval_follows_the_rules_confidence_and_seed() -> None:
    labels, candidate, production = _noisy()

    def interval(**rule: float) -> tuple[float, float]:
        evidence = decide(labels, candidate, 0.5, 0.5, production, 0.5,
                          PromotionRule(min_pr_auc_lift=1.0, resamples=500, **rule))[2]  # type: ignore[arg-type]
        assert evidence.f1_gain_low is not None
        assert evidence.f1_gain_high is not None
        return evidence.f1_gain_low, evidence.f1_gain_high

    assert interval(seed=1) == interval(seed=1)
    assert interval(seed=1) != interval(seed=2)
    (wide_low, wide_high), (narrow_low, narrow_high) = interval(confidence=0.99), interval(confidence=0.6)
    assert wide_low < narrow_low < narrow_high < wide_high


def test_f1_from_counts_by_hand_and_zero_without_any_positive_or_flag() -> None:
    f1 = f1_from_counts(np.array([2, 0, 0]), np.array([1, 0, 3]), np.array([1, 0, 0]))
    assert f1.tolist() == [pytest.approx(4 / 6), 0.0, 0.0]
