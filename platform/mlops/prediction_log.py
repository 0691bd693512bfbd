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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict

from mlops.features import to_micros
from mlops.log_owner import check_owner
from mlops.settings import Settings

log = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".arrows"
_ENTITY, _INPUT, _FEATURE = "entity.", "input.", "feature."
FLAT_PREFIXES = (_ENTITY, _INPUT, _FEATURE)  # the nested records' columns in a table
_MAX_SEGMENT_ROWS = 200_000  # a new segment now and then keeps each file a readable size
_BUFFER_BYTES = 1 << 16
# A segment of this many batches (the service writes an answer at a time) is read as one chunk per column:
# Arrow's kernels pay per chunk, and filtering 2,000 one-row batches of 90 columns took 0.3 s.
_COMBINE_FROM_BATCHES = 256
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY_MICROS = 86_400_000_000


class PredictionInputs(BaseModel):
    """What was asked and what the model saw: one event, ready to score (the service gathers it)."""

    model_config = ConfigDict(extra="forbid")

    event_id: str
    event_timestamp: datetime
    entities: dict[str, str]
    inputs: dict[str, Any]
    features: dict[str, float]
    unknown_entities: list[str]
    unknown_categories: list[str]
    retry: bool = False  # the id was answered before: these are its first copy's features
    features_exact: bool = True  # False: older than the histories reach back (beyond the lateness allowance)


class PredictionRecord(PredictionInputs):
    """What was asked, what the model saw, and what it answered."""

    logged_at: datetime
    probability: float
    decision: str
    model_name: str
    model_version: str
    request_id: str = ""
    latency_s: float | None = None
    role: str = "champion"  # "challenger" / PAIRED_ROLE for shadow scores logged beside the answer


# The champion's score, off the response path, of a row the canary answered: the canary analysis
# compares PR-AUC on the same rows (a paired bootstrap).
PAIRED_ROLE = "champion-paired"
# A retry of an event id already answered: logged once per copy, beside the first answer's record.
RETRY_ROLE = "retry"

# The plain columns in their order on disk (existing segments have it), before the nested ones.
PLAIN_FIELDS = ("event_id", "event_timestamp", "logged_at", "unknown_entities", "unknown_categories",
                 "probability", "decision", "model_name", "model_version", "request_id", "latency_s", "role",
                 "retry", "features_exact")  # segments written before these two lack them: read as the defaults


def log_dir(settings: Settings) -> Path:
    """The home's prediction log; ConfigError when another tracking store claimed it (mlops.log_owner)."""
    directory = settings.resolved_home / "predictions"
    check_owner(settings, directory)
    return directory


def _row(record: PredictionRecord) -> dict[str, Any]:
    # Attribute reads, not model_dump: this runs for every prediction. Times go to Arrow as integer
    # microseconds (its timestamp columns' own unit): converting datetimes cost 15 us per record.
    row = {name: getattr(record, name) for name in PLAIN_FIELDS}
    row["event_timestamp"], row["logged_at"] = to_micros(record.event_timestamp), to_micros(record.logged_at)
    row.update({_ENTITY + k: v for k, v in record.entities.items()})
    row.update({_INPUT + k: v for k, v in record.inputs.items()})
    row.update({_FEATURE + k: float(v) for k, v in record.features.items()})
    return row


def _layout(row: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    # Names and value types decide the layout; looked up, since rows repeat a few of them.
    key = (tuple(row), tuple(map(type, row.values())))
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS[key] = tuple((name, _kind(name, value)) for name, value in row.items())
    return layout


_LAYOUTS: dict[tuple[tuple[str, ...], tuple[type, ...]], tuple[tuple[str, str], ...]] = {}


_PLAIN_KINDS = {"event_timestamp": "time", "logged_at": "time", "unknown_entities": "strings",
                "unknown_categories": "strings", "probability": "float", "latency_s": "float", "retry": "bool",
                "features_exact": "bool"}


def _kind(name: str, value: Any) -> str:
    # Fixed per field, whatever the value: a challenger's latency_s of None is still a float column,
    # so segments of champion and challenger records concatenate.
    if name in _PLAIN_KINDS:
        return _PLAIN_KINDS[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or name.startswith(_ENTITY):
        return "string"
    return "float"


_TYPES = {"time": pa.timestamp("us", tz="UTC"), "strings": pa.list_(pa.string()), "string": pa.string(),
          "float": pa.float64(), "bool": pa.bool_()}


@functools.cache  # building a schema costs more than writing a small batch; rows repeat a few layouts
def _schema_of(layout: tuple[tuple[str, str], ...]) -> pa.Schema:
    return pa.schema([pa.field(name, _TYPES[kind]) for name, kind in layout])


@functools.cache
def _struct_of(layout: tuple[tuple[str, str], ...]) -> pa.StructType:
    return pa.struct(list(_schema_of(layout)))


class _Segment:
    """One open stream file of one day and one row layout (its schema)."""

    def __init__(self, directory: Path, day: str, layout: tuple[tuple[str, str], ...]) -> None:
        folder = directory / day
        folder.mkdir(parents=True, exist_ok=True)
        self.day, self.rows = day, 0
        schema, self._struct = _schema_of(layout), _struct_of(layout)
        stamp = datetime.now(UTC).strftime("%H%M%S%f")
        self.path = folder / f"{stamp}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SEGMENT_SUFFIX}"
        # Arrow's own buffered file, flushed once per write: a Python file object took one call
        # back into Python per buffer of the batch (45 us more per write).
        self.sink = pa.output_stream(str(self.path), buffer_size=_BUFFER_BYTES)
        self.writer = pa.ipc.new_stream(self.sink, schema)
        self._sync_descriptor = os.open(self.path, os.O_RDONLY)  # fsync syncs the file, whichever descriptor
        _fsync_dir(folder)  # the file's name must survive a crash too, not only its bytes

    def write(self, rows: list[dict[str, Any]]) -> None:
        """Hand ``rows`` to the OS (survives SIGKILL); :meth:`sync` makes them survive power loss."""
        # One conversion of the rows as structs (tuples in the layout's order): building column by
        # column (from_pylist) cost about 4 us per column, 160 us for one 35-column record.
        values = [tuple(row.values()) for row in rows]
        self.writer.write_batch(pa.RecordBatch.from_struct_array(pa.array(values, type=self._struct)))
        self.sink.flush()
        self.rows += len(rows)

    def sync(self) -> None:
        os.fsync(self._sync_descriptor)

    def sync_descriptor(self) -> int:
        """A new descriptor of the file, for an fsync outside the log's lock (the caller closes it)."""
        return os.dup(self._sync_descriptor)

    def close(self) -> None:
        self.writer.close()
        self.sink.close()
        self.sync()
        os.close(self._sync_descriptor)


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
        self._segments: dict[tuple[tuple[str, str], ...], _Segment] = {}  # by row layout, all of one day
        self._unsynced = False
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None

    def write(self, records: Sequence[PredictionRecord]) -> None:
        """Write ``records`` as one batch per day and row layout; on return the OS holds them (see the module's note).

        Raises whatever the write raised: then none of them may be acknowledged.
        """
        groups: dict[tuple[int, tuple[tuple[str, str], ...]], list[dict[str, Any]]] = {}
        for record in records:
            row = _row(record)
            groups.setdefault((row["logged_at"] // _DAY_MICROS, _layout(row)), []).append(row)
        with self._lock:
            for (day, layout), rows in groups.items():
                self._segment_for(f"{_EPOCH + timedelta(days=day):%Y-%m-%d}", layout).write(rows)
            if self.fsync_interval_s == 0:
                for segment in self._segments.values():
                    segment.sync()
            elif groups:
                self._unsynced = True
                self._start_syncer()

    def append(self, record: PredictionRecord) -> None:
        """Write ``record``; returns once it is written (see the module's note)."""
        self.write([record])

    def close(self) -> None:
        """Stop the background fsync, then fsync and close the segments."""
        self._stop.set()
        if self._syncer is not None:
            self._syncer.join()
        with self._lock:
            self._close_segments()

    def _close_segments(self) -> None:
        segments, self._segments = self._segments, {}
        for segment in segments.values():
            segment.close()

    def _start_syncer(self) -> None:
        """Start the fsync thread once (call with the lock held)."""
        if self._syncer is None and not self._stop.is_set():
            self._syncer = threading.Thread(target=self._sync_every_interval, name="prediction-log-fsync",
                                            daemon=True)
            self._syncer.start()

    def _sync_every_interval(self) -> None:
        while not self._stop.wait(self.fsync_interval_s):
            with self._lock:
                if not self._unsynced:
                    continue
                # fsync duplicate descriptors outside the lock: writers never wait for the disk.
                descriptors = [segment.sync_descriptor() for segment in self._segments.values()]
                self._unsynced = False
            for descriptor in descriptors:
                try:
                    os.fsync(descriptor)
                except OSError:  # already acknowledged; the next interval (or close) tries again
                    log.exception("prediction log fsync failed")
                    with self._lock:
                        self._unsynced = True
                finally:
                    os.close(descriptor)

    def _segment_for(self, day: str, layout: tuple[tuple[str, str], ...]) -> _Segment:
        """The open segment of ``day`` and ``layout`` (call with the lock held); a new day closes the old ones."""
        if any(segment.day != day for segment in self._segments.values()):
            self._close_segments()
        current = self._segments.get(layout)
        if current is None or current.rows >= _MAX_SEGMENT_ROWS:
            if current is not None:
                current.close()
            self._segments[layout] = current = _Segment(self.directory, day, layout)
        return current


def read_segment(path: Path) -> Iterator[pa.RecordBatch]:
    """The complete batches of one stream, read from a memory map (the batches' buffers point into
    it: a reader touches only the columns it reads); a torn tail (crash mid-write) ends it."""
    try:
        with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
            while True:
                try:
                    yield reader.read_next_batch()
                except StopIteration:
                    return
    except pa.ArrowInvalid:
        return


def segment_paths(directory: Path, start: datetime | None, end: datetime | None) -> list[Path]:
    """The segments of the days ``[start, end)`` touches (either bound optional), oldest day first."""
    first_day = f"{start.astimezone(UTC):%Y-%m-%d}" if start else ""
    last_day = f"{end.astimezone(UTC):%Y-%m-%d}" if end else "9999-99-99"
    return [path for folder in sorted(p for p in directory.glob("*") if p.is_dir() and first_day <= p.name <= last_day)
            for path in sorted(folder.glob(f"*{SEGMENT_SUFFIX}"))]


def in_window(logged_at: pa.ChunkedArray | pa.Array, start: datetime | None, end: datetime | None) -> pa.Array:
    """``start <= logged_at < end`` (either bound optional) as a boolean mask, computed in Arrow."""
    mask = pa.array(np.ones(len(logged_at), dtype=bool))
    if start is not None:
        mask = pc.and_(mask, pc.greater_equal(logged_at, pa.scalar(start.astimezone(UTC), logged_at.type)))
    if end is not None:
        mask = pc.and_(mask, pc.less(logged_at, pa.scalar(end.astimezone(UTC), logged_at.type)))
    return pc.fill_null(mask, False)


def window_tables(directory: Path, start: datetime | None, end: datetime | None) -> list[pa.Table]:
    """The log's rows with ``start <= logged_at < end`` (either bound optional), one table per segment."""
    tables = []
    for path in segment_paths(directory, start, end):
        batches = list(read_segment(path))
        if batches:
            table = pa.Table.from_batches(batches)
            if len(batches) >= _COMBINE_FROM_BATCHES:
                table = table.combine_chunks()
            tables.append(table.filter(in_window(table.column("logged_at"), start, end)))
    return tables


def read_predictions(directory: Path, *, start: datetime | None = None,
                     end: datetime | None = None) -> list[PredictionRecord]:
    """Records with ``start <= logged_at < end`` (either bound optional), oldest first."""
    records = []
    for table in window_tables(directory, start, end):
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
