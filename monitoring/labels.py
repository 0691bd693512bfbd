"""Late labels: ingested by transaction id, joined with the prediction log, and the model quality
they reveal per time window and per model version (champion and shadow challenger side by side
once the log carries the role), next to the quality estimated from the same predictions' probabilities
and their calibration error (ECE), which says whether that estimate can be trusted.

Labels live in ``<home>/monitoring/labels.parquet``, one row per id; a label ingested again for
the same id replaces the earlier one (a chargeback can overturn a first verdict).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from mlops.calibration import calibration_report
from mlops.contract import DataContract
from mlops.errors import InputError
from mlops.score_map import ScoreMap
from monitoring.estimated_quality import QualityEstimate, estimate_quality

LABELS_FILE = "labels.parquet"
ID = "event_id"
LABEL = "label"


class QualityRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    window_start: str
    model_version: str
    role: str
    labelled: int
    positives: int
    precision: float
    recall: float
    f1: float
    pr_auc: float
    estimate: QualityEstimate | None = None  # from the same predictions' probabilities, as if unlabelled
    ece: float | None = None
    unreliable: str = ""  # why the estimate is not to be trusted (the calibration guard), if it is not

    def gap(self, metric: str) -> float | None:
        """Realized minus estimated ``metric``."""
        return None if self.estimate is None else float(getattr(self, metric)) - self.estimate.metric(metric).estimate


def _read_table(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise InputError(f"label file not found: {path}")
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        if path.suffix == ".csv":
            return pd.read_csv(path, dtype={0: str})
    except (ValueError, OSError) as exc:
        raise InputError(f"cannot read labels from {path}: {exc}") from exc
    raise InputError(f"label file must be .csv or .parquet, got {path.name!r}")


def normalise_labels(frame: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """(event_id, label) from a table keyed by the contract's id column (or event_id), label 0/1."""
    id_column = next((c for c in (contract.id_column, ID) if c in frame), None)
    label_column = next((c for c in (contract.label_column, LABEL) if c in frame), None)
    if id_column is None or label_column is None:
        raise InputError(f"labels need an id column ({contract.id_column} or {ID}) and a label column "
                         f"({contract.label_column} or {LABEL}); got {', '.join(map(str, frame.columns))}")
    labels = pd.to_numeric(frame[label_column], errors="coerce")
    bad = frame.loc[~labels.isin([0, 1]), id_column]
    if len(bad):
        raise InputError(f"labels must be 0 or 1: {len(bad)} row(s) are not, first id {bad.iloc[0]!r}",
                         field=str(label_column))
    return pd.DataFrame({ID: frame[id_column].astype(str), LABEL: labels.astype("int64")})


def ingest_labels(source: Path, contract: DataContract, monitoring_dir: Path) -> tuple[int, int]:
    """Merge the file's labels into the store; returns (labels in the file, labels stored now)."""
    incoming = normalise_labels(_read_table(source), contract)
    store = monitoring_dir / LABELS_FILE
    merged = pd.concat([read_labels(monitoring_dir), incoming], ignore_index=True)
    merged = merged.drop_duplicates(ID, keep="last").reset_index(drop=True)
    monitoring_dir.mkdir(parents=True, exist_ok=True)
    merged.to_parquet(store, index=False)
    return len(incoming), len(merged)


def read_labels(monitoring_dir: Path) -> pd.DataFrame:
    store = monitoring_dir / LABELS_FILE
    if not store.exists():
        return pd.DataFrame({ID: pd.Series(dtype=str), LABEL: pd.Series(dtype="int64")})
    return pd.read_parquet(store)


def join_labels(window: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """The window's predictions that have a label, with the label."""
    return window.merge(labels, on=ID, how="inner")


def average_precision(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the precision-recall curve as average precision (scikit-learn's definition)."""
    positives = int(labels.sum())
    if positives == 0:
        return 0.0
    order = np.argsort(-scores, kind="mergesort")
    sorted_scores, sorted_labels = scores[order], labels[order]
    # One point per distinct score: ties are taken together.
    last_of_tie = np.r_[np.flatnonzero(np.diff(sorted_scores)), sorted_labels.size - 1]
    true_positives = np.cumsum(sorted_labels)[last_of_tie]
    precision = true_positives / (last_of_tie + 1)
    recall = true_positives / positives
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _scores(group: pd.DataFrame, positive: str, score_map: ScoreMap | None) -> dict[str, object]:
    truth = group[LABEL].to_numpy(dtype="int64")
    predicted = (group["decision"] == positive).to_numpy()
    tp = int(np.sum(predicted & (truth == 1)))
    precision = tp / int(predicted.sum()) if predicted.any() else 0.0
    recall = tp / int(truth.sum()) if truth.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    probabilities = group["probability"].to_numpy(dtype="float64")
    return {"labelled": len(group), "positives": int(truth.sum()), "precision": precision, "recall": recall,
            "f1": f1, "pr_auc": average_precision(truth, probabilities),
            "estimate": estimate_quality(probabilities, predicted, score_map=score_map),
            "ece": calibration_report(truth, probabilities).ece}


def quality(labelled: pd.DataFrame, window: str, positive: str,
            score_maps: Mapping[str, ScoreMap | None] | None = None) -> list[QualityRow]:
    """Precision, recall, F1 and PR-AUC per ``window`` (a pandas frequency such as 1h) and model version,
    with their estimate (through the version's score map in ``score_maps``, as the drift job estimates)
    and the ECE; ``positive`` is the decision that predicts a positive label (the contract's)."""
    if labelled.empty:
        return []
    frame = labelled.assign(window_start=pd.to_datetime(labelled["logged_at"], utc=True).dt.floor(window),
                            role=labelled.get("role", "served"))
    rows = []
    for key, group in frame.groupby(["window_start", "model_version", "role"], sort=True):
        start, version, role = cast(tuple[pd.Timestamp, str, str], key)
        rows.append(QualityRow(window_start=start.isoformat(), model_version=str(version), role=str(role),
                               **_scores(group, positive, (score_maps or {}).get(str(version)))))
    return rows
