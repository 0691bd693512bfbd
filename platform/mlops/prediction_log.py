"""The prediction log: one record per answered prediction, appended by the service and read by
monitoring and the skew check by time window. It lives in the core so readers never import serving.

Records are JSON lines in one file per UTC day under ``<home>/predictions/``; each line is written
with a single append and flushed before the answer is sent.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from mlops.settings import Settings


class PredictionRecord(BaseModel):
    """What was asked, what the model saw, and what it answered."""

    model_config = ConfigDict(extra="forbid")

    event_id: str
    event_timestamp: datetime
    logged_at: datetime
    entities: dict[str, str]
    inputs: dict[str, Any]
    features: dict[str, float]
    unknown_entities: list[str]
    unknown_categories: list[str]
    probability: float
    decision: str
    model_name: str
    model_version: str


def log_dir(settings: Settings) -> Path:
    return settings.resolved_home / "predictions"


class PredictionLog:
    """Appends records to the day's file; safe to call from many threads."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._lock = threading.Lock()

    def append(self, record: PredictionRecord) -> None:
        line = record.model_dump_json() + "\n"
        path = self.directory / f"{record.logged_at.astimezone(UTC):%Y-%m-%d}.jsonl"
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()


def read_predictions(directory: Path, *, start: datetime | None = None,
                     end: datetime | None = None) -> list[PredictionRecord]:
    """Records with ``start <= logged_at < end`` (either bound optional), oldest first."""
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            record = PredictionRecord.model_validate(json.loads(line))
            if (start is None or record.logged_at >= start) and (end is None or record.logged_at < end):
                records.append(record)
    return sorted(records, key=lambda r: r.logged_at)

