"""The prediction log: one record per answered prediction, appended by the service and read by
monitoring and the skew check by time window. It lives in the core so readers never import serving.

Layout: ``<home>/predictions/<UTC day>/<segment>.arrows``, Arrow IPC streams (columnar). Each
writer process owns its segments, so replicas sharing a home never interleave bytes.

Durability: :meth:`PredictionLog.write` appends its records as one record batch to the file (the
OS's page cache) and returns; the service answers only after that, so an acknowledged prediction
survives SIGKILL of the process: the kernel still holds and writes the bytes. fsync, which only
adds protection against an OS crash or power loss, runs every ``fsync_interval_s`` on a background
thread (0: before :meth:`write` returns); it cost about half the infer route's throughput on this
disk. The service groups the records of concurrent requests into one write (a batch costs about
the same as one record). A batch cut short by a crash is the stream's torn tail; readers stop there.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from mlops.settings import Settings

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".arrows"
_ENTITY, _INPUT, _FEATURE = "entity.", "input.", "feature."
_MAX_SEGMENT_ROWS = 200_000  # a new segment now and then keeps each file a readable size


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
    request_id: str = ""
    latency_s: float | None = None
    role: str = "champion"  # "challenger" for shadow scores logged beside the champion's


_PLAIN_FIELDS = [n for n in PredictionRecord.model_fields if n not in ("entities", "inputs", "features")]


def log_dir(settings: Settings) -> Path:
    return settings.resolved_home / "predictions"


def _row(record: PredictionRecord) -> dict[str, Any]:
    # Attribute reads, not model_dump: this runs for every prediction on the writer thread.
    row = {name: getattr(record, name) for name in _PLAIN_FIELDS}
    row.update({_ENTITY + k: v for k, v in record.entities.items()})
    row.update({_INPUT + k: v for k, v in record.inputs.items()})
    row.update({_FEATURE + k: float(v) for k, v in record.features.items()})
    return row


def _schema(row: dict[str, Any]) -> pa.Schema:
    return _schema_of(tuple((name, _kind(name, value)) for name, value in row.items()))


def _kind(name: str, value: Any) -> str:
    if name in ("event_timestamp", "logged_at"):
        return "time"
    if name in ("unknown_entities", "unknown_categories"):
        return "strings"
    if isinstance(value, bool) or not isinstance(value, int | float) or name.startswith(_ENTITY):
        return "string"
    return "float"


_TYPES = {"time": pa.timestamp("us", tz="UTC"), "strings": pa.list_(pa.string()), "string": pa.string(),
          "float": pa.float64()}


@functools.cache  # building a schema costs more than writing a small batch; rows repeat a few layouts
def _schema_of(layout: tuple[tuple[str, str], ...]) -> pa.Schema:
    return pa.schema([pa.field(name, _TYPES[kind]) for name, kind in layout])


class _Segment:
    """One open stream file; its schema is fixed by the first batch."""

    def __init__(self, directory: Path, day: str, schema: pa.Schema) -> None:
        folder = directory / day
        folder.mkdir(parents=True, exist_ok=True)
        self.day, self.schema, self.rows = day, schema, 0
        stamp = datetime.now(UTC).strftime("%H%M%S%f")
        self.path = folder / f"{stamp}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SEGMENT_SUFFIX}"
        self.sink = self.path.open("wb")
        self.writer = pa.ipc.new_stream(self.sink, schema)
        _fsync_dir(folder)  # the file's name must survive a crash too, not only its bytes

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Hand ``rows`` to the OS (survives SIGKILL); :meth:`sync` makes them survive power loss."""
        self.writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=self.schema))
        self.sink.flush()
        self.rows += len(rows)

    def sync(self) -> None:
        os.fsync(self.sink.fileno())

    def close(self) -> None:
        self.writer.close()
        self.sink.flush()
        self.sync()
        self.sink.close()


def _fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class PredictionLog:
    """Appends from any thread or from async code; each call's records are written when it returns."""

    def __init__(self, directory: Path, *, fsync_interval_s: float = 1.0) -> None:
        self.directory = directory
        self.fsync_interval_s = fsync_interval_s
        self._lock = threading.Lock()
        self._segment: _Segment | None = None
        self._unsynced = False
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None

    def write(self, records: Sequence[PredictionRecord]) -> None:
        """Write ``records`` as one batch per day; on return the OS holds them (see the module's note).

        Raises whatever the write raised: then none of them may be acknowledged.
        """
        by_day: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            by_day.setdefault(f"{record.logged_at.astimezone(UTC):%Y-%m-%d}", []).append(_row(record))
        with self._lock:
            for day, rows in by_day.items():
                self._segment_for(day, _schema(rows[0])).write(rows)
            if self.fsync_interval_s == 0:
                if self._segment is not None:
                    self._segment.sync()
            elif by_day:
                self._unsynced = True
                self._start_syncer()

    def append(self, record: PredictionRecord) -> None:
        """Write ``record``; returns once it is written (see the module's note)."""
        self.write([record])

    def close(self) -> None:
        """Stop the background fsync, then fsync and close the segment."""
        self._stop.set()
        if self._syncer is not None:
            self._syncer.join()
        with self._lock:
            if self._segment is not None:
                self._segment.close()
                self._segment = None

    def _start_syncer(self) -> None:
        """Start the fsync thread once (call with the lock held)."""
        if self._syncer is None and not self._stop.is_set():
            self._syncer = threading.Thread(target=self._sync_every_interval, name="prediction-log-fsync",
                                            daemon=True)
            self._syncer.start()

    def _sync_every_interval(self) -> None:
        while not self._stop.wait(self.fsync_interval_s):
            with self._lock:
                if not self._unsynced or self._segment is None:
                    continue
                # fsync a duplicate descriptor outside the lock: writers never wait for the disk.
                descriptor, self._unsynced = os.dup(self._segment.sink.fileno()), False
            try:
                os.fsync(descriptor)
            except OSError:  # already acknowledged; the next interval (or close) tries again
                log.exception("prediction log fsync failed")
                with self._lock:
                    self._unsynced = True
            finally:
                os.close(descriptor)

    def _segment_for(self, day: str, schema: pa.Schema) -> _Segment:
        current = self._segment
        if current is None or current.day != day or current.schema != schema or current.rows >= _MAX_SEGMENT_ROWS:
            if current is not None:
                current.close()
            self._segment = current = _Segment(self.directory, day, schema)
        return current


def _read_segment(path: Path) -> Iterator[pa.RecordBatch]:
    """The complete batches of one stream; a torn tail (crash mid-write) ends it."""
    try:
        with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
            while True:
                try:
                    yield reader.read_next_batch()
                except StopIteration:
                    return
    except pa.ArrowInvalid:
        return


def _window_table(directory: Path, start: datetime | None, end: datetime | None) -> list[pa.Table]:
    tables = []
    first_day = f"{start.astimezone(UTC):%Y-%m-%d}" if start else ""
    last_day = f"{end.astimezone(UTC):%Y-%m-%d}" if end else "9999-99-99"
    for folder in sorted(p for p in directory.glob("*") if p.is_dir() and first_day <= p.name <= last_day):
        for path in sorted(folder.glob(f"*{SEGMENT_SUFFIX}")):
            batches = list(_read_segment(path))
            if not batches:
                continue
            table = pa.Table.from_batches(batches)
            logged = table.column("logged_at").to_pylist()
            keep = [(start is None or t >= start) and (end is None or t < end) for t in logged]
            tables.append(table.filter(pa.array(keep, pa.bool_())))
    return tables


def read_predictions(directory: Path, *, start: datetime | None = None,
                     end: datetime | None = None) -> list[PredictionRecord]:
    """Records with ``start <= logged_at < end`` (either bound optional), oldest first."""
    records = []
    for table in _window_table(directory, start, end):
        for row in table.to_pylist():
            nested: dict[str, dict[str, Any]] = {"entities": {}, "inputs": {}, "features": {}}
            plain = {}
            for name, value in row.items():
                for prefix, target in ((_ENTITY, "entities"), (_INPUT, "inputs"), (_FEATURE, "features")):
                    if name.startswith(prefix):
                        nested[target][name[len(prefix):]] = value
                        break
                else:
                    plain[name] = value
            records.append(PredictionRecord.model_validate({**plain, **nested}))
    return sorted(records, key=lambda r: r.logged_at)


def read_prediction_frame(directory: Path, *, start: datetime | None = None,
                          end: datetime | None = None) -> pd.DataFrame:
    """One row per prediction in ``[start, end)`` by logged_at, oldest first.

    Columns: event_id, request_id, event_timestamp, logged_at, model_name, model_version, role,
    probability, decision, latency_s, unknown_entities and unknown_categories (lists), then the
    entity keys, raw inputs and computed features under their own names.
    """
    import pandas as pd

    tables = _window_table(directory, start, end)
    if not tables:
        return pd.DataFrame(columns=[n for n in PredictionRecord.model_fields if n not in
                                     ("entities", "inputs", "features")])
    table = pa.concat_tables(tables, promote_options="default")
    frame: pd.DataFrame = table.to_pandas()
    renamed = {c: c.split(".", 1)[1] for c in frame.columns if c.startswith((_ENTITY, _INPUT, _FEATURE))}
    return frame.rename(columns=renamed).sort_values("logged_at", kind="stable").reset_index(drop=True)
