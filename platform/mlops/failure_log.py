"""The failure log: rows a model version failed to score, appended by the service and read by the
canary analysis, whose error-rate check needs each arm's failures beside its answered predictions
(the prediction log holds answered predictions only).

Layout: ``<home>/failures/<UTC day>/<writer>.jsonl``, one JSON object per line. Each writer process
owns its file, so replicas sharing a home never interleave lines; a line cut short by a crash is
skipped by readers. Failures are rare, so a line per failed call (not per row) is cheap enough to
write on the request path.
"""

from __future__ import annotations

import logging
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from mlops.settings import Settings

log = logging.getLogger(__name__)
_MAX_ERROR_CHARS = 300


class FailureRecord(BaseModel):
    """``rows`` rows that ``model_version`` (serving as ``role``) failed to score at ``logged_at``."""

    model_config = ConfigDict(extra="forbid")

    logged_at: datetime
    model_name: str
    model_version: str
    role: str
    rows: int
    error: str


def failure_dir(settings: Settings) -> Path:
    return settings.resolved_home / "failures"


def describe(exc: BaseException) -> str:
    """The error as one short line: its class and the start of its message."""
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:_MAX_ERROR_CHARS]


class FailureLog:
    """Appends failure records to this process's own file of the day."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._writer = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"

    def write(self, records: list[FailureRecord]) -> None:
        days: dict[str, list[FailureRecord]] = {}
        for record in records:
            days.setdefault(f"{record.logged_at.astimezone(UTC):%Y-%m-%d}", []).append(record)
        for day, written in days.items():
            folder = self.directory / day
            folder.mkdir(parents=True, exist_ok=True)
            payload = "".join(record.model_dump_json() + "\n" for record in written).encode()
            descriptor = os.open(folder / f"{self._writer}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(descriptor, payload)  # one append: a record is whole or (after a crash) a torn last line
            finally:
                os.close(descriptor)


def read_failures(directory: Path, *, start: datetime | None = None,
                  end: datetime | None = None) -> list[FailureRecord]:
    """Records with ``start <= logged_at < end`` (either bound optional), oldest first."""
    first_day = f"{start.astimezone(UTC):%Y-%m-%d}" if start else ""
    last_day = f"{end.astimezone(UTC):%Y-%m-%d}" if end else "9999-99-99"
    records: list[FailureRecord] = []
    folders = sorted(p for p in directory.glob("*") if p.is_dir() and first_day <= p.name <= last_day)
    for path in (path for folder in folders for path in sorted(folder.glob("*.jsonl"))):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = FailureRecord.model_validate_json(line)
            except ValidationError:
                log.warning("skipped a torn line of %s", path)
                continue
            if (start is None or record.logged_at >= start) and (end is None or record.logged_at < end):
                records.append(record)
    return sorted(records, key=lambda r: r.logged_at)
