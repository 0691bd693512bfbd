"""Evaluation: metrics checked against hand computation, the promotion rule, and the promotion tags."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.steps.deploy import MAX_VERSION_TAGS, promotion_tags
from pipelines.steps.evaluate import EvaluationReport, Metrics, apply_gates, compute_metrics
from pipelines.steps.promotion import PromotionEvidence

pytestmark = pytest.mark.unit

# 3 positives, 5 negatives. At threshold 0.5 the predictions are
#   TP: 0.9, 0.6   FN: 0.3   FP: 0.7, 0.55   TN: 0.2, 0.1, 0.05
LABELS = np.array([1, 1, 1, 0, 0, 0, 0, 0])
PROBA = np.array([0.9, 0.6, 0.3, 0.7, 0.2, 0.1, 0.55, 0.05])


def _metrics(f1: float) -> Metrics:
    return Metrics(f1=f1, precision=0.5, recall=0.5, roc_auc=0.9, pr_auc=0.6, threshold=0.5)


def test_compute_metrics_matches_hand_computation() -> None:
    metrics = compute_metrics(LABELS, PROBA, 0.5)
    assert metrics.precision == pytest.approx(2 / 4)  # TP / (TP + FP)
    assert metrics.recall == pytest.approx(2 / 3)  # TP / (TP + FN)
    assert metrics.f1 == pytest.approx(4 / 7)  # 2 TP / (2 TP + FP + FN) = 4 / 7
    # ROC AUC: positive-negative pairs ranked right: 0.9 beats 5, 0.6 beats 4, 0.3 beats 3 -> 12 / 15.
    assert metrics.roc_auc == pytest.approx(12 / 15)
    # Average precision: precision at each positive in score order: 1/1, 2/3, 3/5.
    assert metrics.pr_auc == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)
    assert metrics.threshold == 0.5


def test_threshold_moves_precision_and_recall() -> None:
    strict = compute_metrics(LABELS, PROBA, 0.8)  # only 0.9 flagged: TP 1, FP 0, FN 2
    assert strict.precision == pytest.approx(1.0)
    assert strict.recall == pytest.approx(1 / 3)
    assert strict.f1 == pytest.approx(0.5)
    loose = compute_metrics(LABELS, PROBA, 0.25)  # TP 3, FP 2, FN 0
    assert loose.precision == pytest.approx(3 / 5)
    assert loose.recall == pytest.approx(1.0)
    assert loose.f1 == pytest.approx(6 / 8)
    # Ranking metrics do not depend on the threshold.
    assert strict.roc_auc == loose.roc_auc
    assert strict.pr_auc == loose.pr_auc


def test_score_equal_to_threshold_counts_as_positive() -> None:
    metrics = compute_metrics(np.array([1, 0]), np.array([0.5, 0.49]), 0.5)
    assert metrics.precision == 1.0
    assert metrics.recall == 1.0
    assert metrics.f1 == 1.0


def test_single_class_labels_give_nan_ranking_metrics_and_zero_f1() -> None:
    metrics = compute_metrics(np.zeros(4, dtype=int), np.array([0.1, 0.2, 0.3, 0.4]), 0.5)
    assert metrics.f1 == 0.0
    assert metrics.precision == 0.0
    assert metrics.recall == 0.0
    assert math.isnan(metrics.roc_auc)
    assert math.isnan(metrics.pr_auc)


def test_gates_block_a_promotion_naming_every_blocker() -> None:
    blockers = ["slice country=NG: F1 0.2000 < production 0.5000 - 0.1", "score depends on transaction_id"]
    assert apply_gates("promote", "F1 beats production", blockers) == (
        "reject", "F1 beats production, but blocked: slice country=NG: F1 0.2000 < production 0.5000 - 0.1; "
        "score depends on transaction_id")


def test_gates_leave_a_clean_promotion_and_any_rejection_alone() -> None:
    assert apply_gates("promote", "F1 beats production", []) == ("promote", "F1 beats production")
    assert apply_gates("reject", "F1 too low", ["slice x"]) == ("reject", "F1 too low")


def test_promotion_tags_are_the_few_a_person_reads_with_both_f1s() -> None:
    candidate = compute_metrics(LABELS, PROBA, 0.5)
    production = _metrics(0.5)
    reason = "F1 gain over production +0.0714, 95% paired-bootstrap interval [+0.0300, +0.1100]"
    report = EvaluationReport(candidate=candidate, production=production, production_version="3",
                              margin=0.02, decision="promote", reason=reason,
                              promotion=PromotionEvidence(rows=600, base_rate=0.02, pr_auc_lift=30.5, f1_gain=0.2,
                                                          f1_gain_low=0.11, f1_gain_high=0.29))
    tags = promotion_tags(report)
    assert tags == {"decision": "promote", "decision_reason": reason, "candidate_f1": f"{4 / 7:.4f}",
                    "candidate_pr_auc": f"{candidate.pr_auc:.4f}", "production_f1": "0.5000",
                    "production_version_at_evaluation": "3"}
    # With the run_id the registry adds and deploy's deployed_at, still within the bound.
    assert len(tags) + 2 <= MAX_VERSION_TAGS


def test_promotion_tags_without_production_model() -> None:
    candidate = compute_metrics(LABELS, PROBA, 0.5)
    report = EvaluationReport(candidate=candidate, production=None, production_version=None,
                              margin=0.02, decision="promote", reason="no model in production yet")
    tags = promotion_tags(report)
    assert tags["decision"] == "promote"
    assert tags["production_version_at_evaluation"] == "none"
    assert "production_f1" not in tags
    assert tags["candidate_f1"] == f"{4 / 7:.4f}"


def test_a_rejection_is_tagged_with_its_reason_and_both_f1s() -> None:
    candidate = _metrics(0.4)
    production = _metrics(0.6)
    reason = "F1 gain over production -0.2000, 95% paired-bootstrap interval [-0.2600, -0.1400]"
    report = EvaluationReport(candidate=candidate, production=production, production_version="7",
                              margin=0.02, decision="reject", reason=reason)
    tags = promotion_tags(report)
    assert tags["decision"] == "reject"
    assert tags["decision_reason"] == reason
    assert tags["candidate_f1"] == "0.4000"
    assert tags["production_f1"] == "0.6000"
