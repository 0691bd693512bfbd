"""The failure log: rows a model version failed to score, appended by the service and read by the
canary analysis, whose error-rate check needs each arm's failures beside its answered predictions
(the prediction log holds answered predictions only).

Layout: ``<home>/failures/<UTC day>/<writer>.jsonl``, one JSON object per line. Each writer process
owns its file, so replicas sharing a home never interleave lines; a line cut short by a crash is
skipped by readers (its bytes too, when the cut split a UTF-8 character). A file or folder that
cannot be read at all (a folder named ``*.jsonl``, no permission, a whole line that is not UTF-8)
raises UnreadableLogError naming it: the canary analysis never judges without failures it could not
read. Failures are rare, so a line per failed call (not per row) is cheap enough to
write on the request path.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from mlops.errors import UnreadableLogError
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
    """Records with ``start <= logged_at < end`` (either bound optional), oldest first; UnreadableLogError
    naming the file or folder that cannot be read."""
    first_day = f"{start.astimezone(UTC):%Y-%m-%d}" if start else ""
    last_day = f"{end.astimezone(UTC):%Y-%m-%d}" if end else "9999-99-99"
    records: list[FailureRecord] = []
    if not directory.exists():
        return records
    folders = sorted(p for p in _listed(directory) if p.is_dir() and first_day <= p.name <= last_day)
    for path in (path for folder in folders for path in sorted(_listed(folder)) if path.suffix == ".jsonl"):
        for line in _lines(path):
            try:
                record = FailureRecord.model_validate_json(line)
            except ValidationError:
                log.warning("skipped a torn line of %s", path)
                continue
            if (start is None or record.logged_at >= start) and (end is None or record.logged_at < end):
                records.append(record)
    return sorted(records, key=lambda r: r.logged_at)


def _listed(folder: Path) -> list[Path]:
    """The folder's entries; a folder that cannot be listed is an error (``glob`` would skip it silently)."""
    try:
        return list(folder.iterdir())
    except OSError as exc:
        raise _unreadable(folder, exc.strerror or str(exc)) from exc


def _lines(path: Path) -> Iterator[str]:
    """The file's lines; a last line without its newline whose bytes are cut mid-character is torn, not
    an error, but any whole line that is not UTF-8 is."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _unreadable(path, exc.strerror or str(exc)) from exc
    whole, _, last = data.rpartition(b"\n")
    try:
        yield from whole.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise _unreadable(path, f"byte {exc.start} is not UTF-8") from exc
    try:
        torn = last.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("skipped a torn line of %s", path)
        return
    if torn:
        yield torn


def _unreadable(path: Path, reason: str) -> UnreadableLogError:
    return UnreadableLogError(f"cannot read the failure log {path}: {reason}; the canary's error rate is not "
                              "judged without it (repair or move it aside, then judge again)")
