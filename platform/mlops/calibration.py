"""Calibration measures: the Brier score, the expected calibration error (ECE) and the reliability
curve over equal-width probability bins. Training and evaluate judge a model with them; the quality
job re-checks a served version with them whenever late labels arrive."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

BINS = 10


class ReliabilityBin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lower: float
    upper: float
    count: int
    mean_predicted: float
    observed_rate: float


class CalibrationReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    brier: float
    ece: float
    bins: list[ReliabilityBin]


def calibration_report(labels: np.ndarray, proba: np.ndarray, bins: int = BINS) -> CalibrationReport:
    """Brier score, expected calibration error and the reliability curve over equal-width bins."""
    labels = labels.astype(np.float64)
    proba = proba.astype(np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(proba, edges[1:-1], right=True), 0, bins - 1)
    rows: list[ReliabilityBin] = []
    ece = 0.0
    for b in range(bins):
        members = which == b
        count = int(members.sum())
        if count == 0:
            continue
        mean_predicted = float(proba[members].mean())
        observed = float(labels[members].mean())
        ece += count / len(proba) * abs(mean_predicted - observed)
        rows.append(ReliabilityBin(lower=float(edges[b]), upper=float(edges[b + 1]), count=count,
                                   mean_predicted=mean_predicted, observed_rate=observed))
    brier = float(np.mean((proba - labels) ** 2)) if len(proba) else float("nan")
    return CalibrationReport(brier=brier, ece=float(ece), bins=rows)


def top_decile_ece(labels: np.ndarray, proba: np.ndarray, bins: int = BINS) -> float:
    """ECE over the 10 % highest scores: where a decision and the estimate of precision before labels live,
    and where an average over all rows hides a miscalibration (most rows score near zero)."""
    if len(proba) == 0:
        return float("nan")
    # The tenth of the rows by rank, not by a quantile threshold: an isotonic map gives most rows one
    # plateau value, and ">= the 90th percentile" would then take nearly all of them.
    top = np.argsort(-proba, kind="stable")[:max(1, int(np.ceil(0.1 * len(proba))))]
    return calibration_report(labels[top], proba[top], bins).ece
