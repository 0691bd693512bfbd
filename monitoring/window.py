"""The current window of the prediction log as a flat table, by time or by row count.

Every column the log holds comes through, the role (champion, challenger, canary, ...) among
them, so quality and drift are grouped by what each record says it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from mlops.prediction_frame import read_prediction_frame

BASE_COLUMNS = ("event_id", "event_timestamp", "logged_at", "model_name", "model_version", "role", "probability",
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


def read_window(directory: Path, spec: WindowSpec, *, arrow_strings: bool = False) -> pd.DataFrame:
    """The window's predictions, oldest first; an empty frame when nothing was logged in it.
    ``arrow_strings``: text kept in Arrow's buffers (:func:`mlops.prediction_frame.read_prediction_frame`)."""
    frame = (read_prediction_frame(directory, start=spec.start, end=spec.end, arrow_strings=arrow_strings)
             if directory.exists()
             else pd.DataFrame(columns=list(BASE_COLUMNS)))
    if spec.last is not None:
        frame = frame.tail(spec.last)
    return frame.reset_index(drop=True)
