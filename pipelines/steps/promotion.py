"""The promotion rule: a candidate is promoted only when it beats chance and production beyond noise.

Two checks on the same test split, both required:

- Baseline: the candidate's PR-AUC must be at least ``min_pr_auc_lift`` times the base rate (the
  PR-AUC of a constant score). A model trained on noise ranks like a constant; its F1 can still
  reach about 2p/(1+p) by flagging almost everything, which beats a production model whose F1 fell
  near 0, so F1 alone cannot stop it.
- Gain beyond noise: the candidate's F1 minus production's, each at its own threshold, resampled
  with the rows paired (one bootstrap resample draws the same rows for both models); the lower
  bound of the ``confidence`` interval must reach ``margin``. Resampling n rows with replacement
  only changes how many rows fall in each of the 8 (label, candidate flag, production flag)
  cells, so each resample is one multinomial draw over those cells: exact and cheap at any n.

Reasons print the numbers behind the decision, so a model card can quote them.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

Decision = Literal["promote", "reject"]


class PromotionRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    margin: float = Field(default=0.02, ge=0.0, le=1.0)
    min_pr_auc_lift: float = Field(default=2.0, ge=1.0)
    confidence: float = Field(default=0.95, gt=0.5, lt=1.0)
    resamples: int = Field(default=2_000, ge=100)
    seed: int = 0


class PromotionEvidence(BaseModel):
    """The numbers the decision was read from."""

    model_config = ConfigDict(extra="forbid")

    rows: int
    base_rate: float
    pr_auc_lift: float
    f1_gain: float | None = None
    f1_gain_low: float | None = None
    f1_gain_high: float | None = None


def f1_from_counts(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    denominator = 2 * tp + fp + fn
    f1: np.ndarray = np.divide(2 * tp, denominator, out=np.zeros(np.shape(tp), dtype="float64"),
                               where=denominator > 0)
    return f1


def paired_f1_gain_interval(labels: np.ndarray, candidate: np.ndarray, production: np.ndarray, *,
                            confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """The ``confidence`` percentile interval of F1(candidate) - F1(production) over paired resamples.

    ``candidate`` and ``production`` are the two models' flags (0/1) on the same rows.
    """
    cell = (labels.astype("int64") * 4 + candidate.astype("int64") * 2 + production.astype("int64"))
    shares = np.bincount(cell, minlength=8) / cell.size
    counts = np.random.default_rng(seed).multinomial(cell.size, shares, size=resamples)
    label, cand, prod = (np.arange(8) >> 2) & 1, (np.arange(8) >> 1) & 1, np.arange(8) & 1

    def f1(flag: np.ndarray) -> np.ndarray:
        return f1_from_counts(counts[:, (label == 1) & (flag == 1)].sum(axis=1),
                              counts[:, (label == 0) & (flag == 1)].sum(axis=1),
                              counts[:, (label == 1) & (flag == 0)].sum(axis=1))

    gains = f1(cand) - f1(prod)
    tail = (1 - confidence) / 2
    low, high = np.quantile(gains, [tail, 1 - tail])
    return float(low), float(high)


def decide(labels: np.ndarray, candidate_proba: np.ndarray, candidate_threshold: float, candidate_pr_auc: float,
           production_proba: np.ndarray | None, production_threshold: float | None,
           rule: PromotionRule) -> tuple[Decision, str, PromotionEvidence]:
    """Promote when the candidate beats the base rate by the lift floor and production beyond noise."""
    labels = np.asarray(labels).astype("int64")
    base_rate = float(labels.mean()) if labels.size else 0.0
    lift = candidate_pr_auc / base_rate if base_rate > 0 and np.isfinite(candidate_pr_auc) else 0.0
    evidence = PromotionEvidence(rows=int(labels.size), base_rate=base_rate, pr_auc_lift=lift)
    baseline = (f"PR-AUC {candidate_pr_auc:.4f} is {lift:.2f}x the base rate {base_rate:.4f} "
                f"(floor {rule.min_pr_auc_lift:.2f}x)")
    if lift < rule.min_pr_auc_lift:
        return "reject", f"{baseline}: it ranks no better than a constant score", evidence
    if production_proba is None or production_threshold is None:
        return "promote", f"no model in production yet; {baseline}", evidence
    cand_flags = np.asarray(candidate_proba) >= candidate_threshold
    prod_flags = np.asarray(production_proba) >= production_threshold
    point = (f1_from_counts(*_counts(labels, cand_flags)) - f1_from_counts(*_counts(labels, prod_flags))).item()
    low, high = paired_f1_gain_interval(labels, cand_flags, prod_flags, confidence=rule.confidence,
                                        resamples=rule.resamples, seed=rule.seed)
    evidence = evidence.model_copy(update={"f1_gain": point, "f1_gain_low": low, "f1_gain_high": high})
    gain = (f"F1 gain over production {point:+.4f}, {rule.confidence:.0%} paired-bootstrap interval "
            f"[{low:+.4f}, {high:+.4f}] over {labels.size:,} rows ({rule.resamples:,} resamples)")
    if low >= rule.margin:
        return "promote", f"{baseline}; {gain}: lower bound >= margin {rule.margin}", evidence
    return "reject", f"{baseline}; {gain}: lower bound below margin {rule.margin}", evidence


def _counts(labels: np.ndarray, flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    positive = labels == 1
    return (np.asarray(np.sum(flags & positive)), np.asarray(np.sum(flags & ~positive)),
            np.asarray(np.sum(~flags & positive)))
