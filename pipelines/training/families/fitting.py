"""What the in-process families share when they fit (never imported by the export step): labels,
Platt calibration on the score's logit, the decision threshold and the validation ranking scores."""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score, roc_auc_score

from mlops.contract import DataContract
from pipelines.steps.calibration import fit_platt
from pipelines.training.families.converted import logit
from pipelines.training.trainer import best_f1_threshold

__all__ = ["best_f1_threshold", "fit_calibration", "labels", "ranking_scores"]


def labels(frame: pd.DataFrame, contract: DataContract) -> np.ndarray:
    return frame[contract.label_column].to_numpy().astype(np.int64)


def fit_calibration(raw_validation: np.ndarray, validation_labels: np.ndarray) -> tuple[float, float]:
    """Class weights inflate a tree's scores as they do the MLP's: Platt on validation maps them back."""
    return fit_platt(logit(raw_validation), validation_labels)


def ranking_scores(labels_: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """(PR-AUC, ROC AUC) of ``scores``."""
    return float(average_precision_score(labels_, scores)), float(roc_auc_score(labels_, scores))
