"""The current window of the prediction log as a flat table, by time or by row count.

One adapter over ``mlops.prediction_log.read_predictions``; when the service's frame reader
(``read_prediction_frame``) lands, only ``_records_frame`` changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from mlops.prediction_log import read_predictions

BASE_COLUMNS = ("event_id", "event_timestamp", "logged_at", "model_name", "model_version", "probability",
                "decision", "unknown_categories")


@dataclass(frozen=True)
class WindowSpec:
    """``start <= logged_at < end`` (either optional), then the newest ``last`` rows when given."""

    start: datetime | None = None
    end: datetime | None = None
    last: int | None = None

    def describe(self) -> str:
        parts = [f"from {self.start.isoformat()}" if self.start else "",
                 f"until {self.end.isoformat()}" if self.end else "",
                 f"newest {self.last:,} rows" if self.last else ""]
        return " ".join(p for p in parts if p) or "the whole log"


def _records_frame(directory: Path, spec: WindowSpec) -> pd.DataFrame:
    rows = []
    for record in read_predictions(directory, start=spec.start, end=spec.end):
        rows.append({
            "event_id": record.event_id, "event_timestamp": record.event_timestamp,
            "logged_at": record.logged_at, "model_name": record.model_name,
            "model_version": record.model_version, "probability": record.probability,
            "decision": record.decision, "unknown_categories": list(record.unknown_categories),
            **record.entities, **record.inputs, **record.features,
        })
    return pd.DataFrame(rows, columns=None if rows else list(BASE_COLUMNS))


def read_window(directory: Path, spec: WindowSpec) -> pd.DataFrame:
    """The window's predictions, oldest first; an empty frame when nothing was logged in it."""
    frame = _records_frame(directory, spec) if directory.exists() else pd.DataFrame(columns=list(BASE_COLUMNS))
    if spec.last is not None:
        frame = frame.tail(spec.last)
    return frame.reset_index(drop=True)
