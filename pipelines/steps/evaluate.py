"""Evaluate: holdout metrics at the model's threshold, the production model on the same holdout,
calibration, per-slice metrics and behavioural tests, the promotion decision, and pictures
(PR curve, confusion matrix, reliability curve) for people."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field
from sklearn.metrics import (
    average_precision_score,
    confusion_matrix,
    f1_score,
    precision_recall_curve,
    precision_score,
    recall_score,
    roc_auc_score,
)

from mlops.calibration import CalibrationReport, calibration_report
from mlops.contract import DataContract
from mlops.inference import OnnxModel
from pipelines.steps.calibration import plot_reliability
from pipelines.steps.promotion import Decision, PromotionEvidence, PromotionRule, decide
from pipelines.steps.quality import (
    BehaviourReport,
    SliceMetrics,
    behavioural_tests,
    slice_masks,
    slice_metrics,
    slice_regressions,
)


class Metrics(BaseModel):
    model_config = ConfigDict(extra="forbid")

    f1: float
    precision: float
    recall: float
    roc_auc: float
    pr_auc: float
    threshold: float


class QualityGates(BaseModel):
    """What besides overall F1 can block a promotion."""

    model_config = ConfigDict(extra="forbid")

    slice_f1_tolerance: float
    slice_min_positives: int
    slice_min_rows: int = 30
    min_pr_auc_lift: float = 2.0


class EvaluationReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate: Metrics
    production: Metrics | None
    production_version: str | None
    margin: float
    decision: Decision
    reason: str
    calibration: CalibrationReport | None = None
    slices: list[SliceMetrics] = Field(default_factory=list)
    production_slices: list[SliceMetrics] = Field(default_factory=list)
    behaviour: BehaviourReport | None = None
    promotion: PromotionEvidence | None = None


def compute_metrics(labels: np.ndarray, proba: np.ndarray, threshold: float) -> Metrics:
    predicted = (proba >= threshold).astype(int)
    both_classes = len(np.unique(labels)) == 2
    return Metrics(
        f1=float(f1_score(labels, predicted, zero_division=0)),
        precision=float(precision_score(labels, predicted, zero_division=0)),
        recall=float(recall_score(labels, predicted, zero_division=0)),
        roc_auc=float(roc_auc_score(labels, proba)) if both_classes else float("nan"),
        pr_auc=float(average_precision_score(labels, proba)) if both_classes else float("nan"),
        threshold=threshold,
    )


def apply_gates(decision: Decision, reason: str, blockers: list[str]) -> tuple[Decision, str]:
    """A promotion the promotion rule allows is still refused when a slice regressed or a behavioural test failed."""
    if decision == "reject" or not blockers:
        return decision, reason
    return "reject", f"{reason}, but blocked: {'; '.join(blockers)}"


def evaluate(test: pd.DataFrame, contract: DataContract, candidate: OnnxModel,
             production: OnnxModel | None, production_version: str | None, margin: float,
             out_dir: Path, *, train: pd.DataFrame, gates: QualityGates) -> EvaluationReport:
    """Score both models on ``test``, run slices and behavioural tests, decide, and draw the pictures."""
    labels = test[contract.label_column].to_numpy().astype(int)
    proba = candidate.predict_proba(test)
    cand_metrics = compute_metrics(labels, proba, candidate.threshold)
    masks = slice_masks(test, train, contract)
    slices = slice_metrics(labels, proba, candidate.threshold, masks, gates.slice_min_rows)
    prod_metrics = None
    prod_proba = None
    prod_slices: list[SliceMetrics] = []
    if production is not None:
        prod_proba = production.predict_proba(test)
        prod_metrics = compute_metrics(labels, prod_proba, production.threshold)
        prod_slices = slice_metrics(labels, prod_proba, production.threshold, masks, gates.slice_min_rows)
    behaviour = behavioural_tests(candidate, test, contract)
    rule = PromotionRule(margin=margin, min_pr_auc_lift=gates.min_pr_auc_lift)
    decision, reason, evidence = decide(labels, proba, candidate.threshold, cand_metrics.pr_auc, prod_proba,
                                        production.threshold if production is not None else None, rule)
    blockers = slice_regressions(slices, prod_slices, gates.slice_f1_tolerance, gates.slice_min_positives)
    decision, reason = apply_gates(decision, reason, blockers + behaviour.failures)
    calibration = calibration_report(labels, proba)
    out_dir.mkdir(parents=True, exist_ok=True)
    _plot_pr_curves(labels, proba, prod_proba, production_version, out_dir / "pr_curve.png", cand_metrics)
    _plot_confusion(labels, (proba >= candidate.threshold).astype(int), out_dir / "confusion_matrix.png",
                    candidate.threshold, (contract.decisions.negative, contract.decisions.positive))
    plot_reliability(calibration, out_dir / "reliability_curve.png", "Served probability, test split",
                     threshold=candidate.threshold)
    _write_curves(labels, proba, calibration, out_dir)
    return EvaluationReport(candidate=cand_metrics, production=prod_metrics,
                            production_version=production_version, margin=margin,
                            decision=decision, reason=reason, calibration=calibration, slices=slices,
                            production_slices=prod_slices, behaviour=behaviour, promotion=evidence)


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend (steps run without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_pr_curves(labels: np.ndarray, proba: np.ndarray, prod_proba: np.ndarray | None,
                    prod_version: str | None, path: Path, operating: Metrics) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    curves = [("candidate", proba)] + ([(f"production v{prod_version}", prod_proba)] if prod_proba is not None else [])
    for label, scores in curves:
        precision, recall, _ = precision_recall_curve(labels, scores)
        ax.plot(recall, precision, label=f"{label} (AP={average_precision_score(labels, scores):.3f})")
    ax.plot([operating.recall], [operating.precision], marker="o", markersize=9, color="black", linestyle="none",
            label=f"operating point (threshold {operating.threshold:.3f})")
    ax.axhline(labels.mean(), color="grey", linestyle=":", label="chance")
    ax.set(xlabel="recall", ylabel="precision", title="Precision-recall on the test split",
           xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write_curves(labels: np.ndarray, proba: np.ndarray, calibration: CalibrationReport, out_dir: Path) -> None:
    """The candidate's PR curve and reliability bins as data (CSV) beside the pictures: `dvc plots` draws them."""
    precision, recall, _ = precision_recall_curve(labels, proba)
    pd.DataFrame({"recall": recall, "precision": precision}).to_csv(out_dir / "pr_curve.csv", index=False)
    pd.DataFrame([b.model_dump() for b in calibration.bins]).to_csv(out_dir / "reliability.csv", index=False)


def _plot_confusion(labels: np.ndarray, predicted: np.ndarray, path: Path, threshold: float,
                    names: tuple[str, str]) -> None:
    plt = _pyplot()
    matrix = confusion_matrix(labels, predicted, labels=[0, 1])
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.imshow(matrix, cmap="Blues")
    for (row, col), count in np.ndenumerate(matrix):
        colour = "white" if count > matrix.max() / 2 else "black"
        ax.text(col, row, str(count), ha="center", va="center", color=colour)
    ax.set(xticks=[0, 1], yticks=[0, 1], xticklabels=names, yticklabels=names,
           xlabel="predicted", ylabel="actual", title=f"Test split at threshold {threshold:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
