"""Model quality beyond one F1: per-slice metrics and behavioural tests, both run by evaluate.

Slices come from the contract (each value of each categorical model input) and from the splits
(test rows whose entity key never occurs in the training split: "unknown" customers, merchants).
Behavioural tests score perturbed copies of the test split through the served ONNX graph, as the
contract declares them (``behaviour``): invariance (fields the model must ignore, the id by default)
and direction (scaling a raw input, features fixed, must not lower or not raise the mean score).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict
from sklearn.metrics import f1_score, precision_score, recall_score

from mlops.contract import DataContract
from mlops.inference import OnnxModel

_INVARIANCE_TOLERANCE = 1e-6


class SliceMetrics(BaseModel):
    """One slice of the test split; a slice under the minimum size is counted but not scored (its
    scores are None: an F1 of 1.0 on three rows says nothing)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    rows: int
    positives: int
    f1: float | None
    precision: float | None
    recall: float | None

    @property
    def scored(self) -> bool:
        return self.f1 is not None


class DirectionalResult(BaseModel):
    """One declared directional test: the mean score change when ``input`` is scaled by ``factor``."""

    model_config = ConfigDict(extra="forbid")

    input: str
    direction: Literal["not_lower", "not_higher"]
    factor: float
    mean_delta: float

    @property
    def failure(self) -> str | None:
        lowered = self.direction == "not_lower" and self.mean_delta < 0
        raised = self.direction == "not_higher" and self.mean_delta > 0
        if not (lowered or raised):
            return None
        way = "lowers" if lowered else "raises"
        return f"scaling {self.input} x{self.factor:g} {way} the mean score by {abs(self.mean_delta):.4f}"


class BehaviourReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invariance_fields: list[str]
    invariance_max_abs_diff: float
    directional: list[DirectionalResult]

    @property
    def failures(self) -> list[str]:
        failed = []
        if not self.invariance_max_abs_diff <= _INVARIANCE_TOLERANCE:
            failed.append(f"score depends on {', '.join(self.invariance_fields)} "
                          f"(max change {self.invariance_max_abs_diff:.3g})")
        failed += [r.failure for r in self.directional if r.failure is not None]
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
        unknown = (~test[key].isin(set(train[key].unique()))).to_numpy()
        if unknown.any():
            masks[f"unknown_{entity.name}"] = unknown
    return masks


def slice_metrics(labels: np.ndarray, proba: np.ndarray, threshold: float,
                  masks: dict[str, np.ndarray], min_rows: int = 1) -> list[SliceMetrics]:
    """F1, precision and recall of each slice with at least ``min_rows`` rows; smaller ones unscored."""
    predicted = (proba >= threshold).astype(int)
    rows = []
    for name, mask in masks.items():
        y, p = labels[mask], predicted[mask]
        if int(mask.sum()) < min_rows:
            rows.append(SliceMetrics(name=name, rows=int(mask.sum()), positives=int(y.sum()),
                                     f1=None, precision=None, recall=None))
            continue
        rows.append(SliceMetrics(name=name, rows=int(mask.sum()), positives=int(y.sum()),
                                 f1=float(f1_score(y, p, zero_division=0)),
                                 precision=float(precision_score(y, p, zero_division=0)),
                                 recall=float(recall_score(y, p, zero_division=0))))
    return rows


def slice_regressions(candidate: list[SliceMetrics], production: list[SliceMetrics], tolerance: float,
                      min_positives: int) -> list[str]:
    """Scored slices (with at least ``min_positives`` frauds) whose F1 falls more than ``tolerance`` below
    production's."""
    theirs = {s.name: s for s in production}
    failed = []
    for ours in candidate:
        other = theirs.get(ours.name)
        if other is None or ours.positives < min_positives or ours.f1 is None or other.f1 is None:
            continue
        if ours.f1 < other.f1 - tolerance:
            failed.append(f"slice {ours.name}: F1 {ours.f1:.4f} < production {other.f1:.4f} - {tolerance}")
    return failed


def _perturbed(values: pd.Series) -> pd.Series | list[str]:
    """Other values of the same dtype: integers moved far away, anything else replaced by new text."""
    if pd.api.types.is_integer_dtype(values):
        return values + 1_000_003
    return [f"perturbed-{i}" for i in range(len(values))]


def behavioural_tests(model: OnnxModel, test: pd.DataFrame, contract: DataContract) -> BehaviourReport:
    """The contract's declared tests, through the served graph: its invariant fields and directions."""
    base = model.predict_proba(test).astype(np.float64)
    fields = [name for name in contract.invariant_fields if name in test.columns]
    renamed = test.assign(**{name: _perturbed(test[name]) for name in fields})
    invariance = float(np.max(np.abs(model.predict_proba(renamed) - base), initial=0.0))
    results = []
    for declared in contract.behaviour.directional:
        scaled = test.assign(**{declared.input: test[declared.input] * declared.factor})
        delta = float(np.mean(model.predict_proba(scaled) - base)) if len(test) else 0.0
        results.append(DirectionalResult(input=declared.input, direction=declared.direction,
                                         factor=declared.factor, mean_delta=delta))
    return BehaviourReport(invariance_fields=fields, invariance_max_abs_diff=invariance, directional=results)
