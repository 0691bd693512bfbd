"""Model quality beyond one F1: per-slice metrics and behavioural tests, both run by evaluate.

Slices come from the contract (each value of each categorical model input) and from the splits
(test rows whose entity key never occurs in the training split: "unknown" customers, merchants).
Behavioural tests score perturbed copies of the test split through the served ONNX graph:
invariance (a field the model must ignore, the transaction id) and direction (raising a raw amount
that an entity's mean aggregates, features fixed, must not lower the mean fraud score).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict
from sklearn.metrics import f1_score, precision_score, recall_score

from mlops.contract import DataContract
from mlops.inference import OnnxModel

_INVARIANCE_TOLERANCE = 1e-6
_DIRECTIONAL_FACTOR = 3.0


class SliceMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    rows: int
    positives: int
    f1: float
    precision: float
    recall: float


class BehaviourReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invariance_field: str
    invariance_max_abs_diff: float
    directional_inputs: list[str]
    directional_factor: float
    directional_mean_delta: float

    @property
    def failures(self) -> list[str]:
        failed = []
        if not self.invariance_max_abs_diff <= _INVARIANCE_TOLERANCE:
            failed.append(f"score depends on {self.invariance_field} (max change {self.invariance_max_abs_diff:.3g})")
        if self.directional_mean_delta < 0:
            failed.append(f"raising {', '.join(self.directional_inputs)} x{self.directional_factor:g} lowers the "
                          f"mean fraud score by {-self.directional_mean_delta:.4f}")
        return failed


def slice_masks(test: pd.DataFrame, train: pd.DataFrame, contract: DataContract) -> dict[str, np.ndarray]:
    masks: dict[str, np.ndarray] = {}
    for column in contract.model_inputs.categorical:
        values = test[column].astype(str)
        for category in contract.column(column).categories or ():
            mask = (values == category).to_numpy()
            if mask.any():
                masks[f"{column}={category}"] = mask
    for entity in contract.entities:
        key = entity.join_key
        unknown = (~test[key].isin(set(train[key]))).to_numpy()
        if unknown.any():
            masks[f"unknown_{entity.name}"] = unknown
    return masks


def slice_metrics(labels: np.ndarray, proba: np.ndarray, threshold: float,
                  masks: dict[str, np.ndarray]) -> list[SliceMetrics]:
    predicted = (proba >= threshold).astype(int)
    rows = []
    for name, mask in masks.items():
        y, p = labels[mask], predicted[mask]
        rows.append(SliceMetrics(name=name, rows=int(mask.sum()), positives=int(y.sum()),
                                 f1=float(f1_score(y, p, zero_division=0)),
                                 precision=float(precision_score(y, p, zero_division=0)),
                                 recall=float(recall_score(y, p, zero_division=0))))
    return rows


def slice_regressions(candidate: list[SliceMetrics], production: list[SliceMetrics], tolerance: float,
                      min_positives: int) -> list[str]:
    """Slices (with at least ``min_positives`` frauds) whose F1 falls more than ``tolerance`` below production's."""
    theirs = {s.name: s for s in production}
    failed = []
    for ours in candidate:
        other = theirs.get(ours.name)
        if other is None or ours.positives < min_positives:
            continue
        if ours.f1 < other.f1 - tolerance:
            failed.append(f"slice {ours.name}: F1 {ours.f1:.4f} < production {other.f1:.4f} - {tolerance}")
    return failed


def directional_inputs(contract: DataContract) -> list[str]:
    """Raw numeric inputs that some entity feature averages: raising one raises it relative to that mean."""
    raw = {n.name for n in contract.model_inputs.numeric}
    return sorted({f.column for v in contract.feature_views for f in v.features
                   if f.agg == "mean" and f.column in raw})


def behavioural_tests(model: OnnxModel, test: pd.DataFrame, contract: DataContract) -> BehaviourReport:
    base = model.predict_proba(test).astype(np.float64)
    renamed = test.assign(**{contract.id_column: [f"perturbed-{i}" for i in range(len(test))]})
    invariance = float(np.max(np.abs(model.predict_proba(renamed) - base), initial=0.0))
    inputs = directional_inputs(contract)
    raised = test.assign(**{name: test[name] * _DIRECTIONAL_FACTOR for name in inputs})
    delta = float(np.mean(model.predict_proba(raised) - base)) if inputs and len(test) else 0.0
    return BehaviourReport(invariance_field=contract.id_column, invariance_max_abs_diff=invariance,
                           directional_inputs=inputs, directional_factor=_DIRECTIONAL_FACTOR,
                           directional_mean_delta=delta)
