"""Feast's SQLite online store read and written directly, without importing feast.

Importing feast takes seconds (about half of the service's start-up), and its SQLite store shares
one connection between all threads behind a lock. The service reads and writes the same tables in
the same layout, so Feast (materialize, `feast` tooling) and the service see each other's rows:

- table ``<project>_<view>`` with columns entity_key, feature_name, value, value_text, event_ts,
  created_ts, primary key (entity_key, feature_name);
- entity_key: Feast's ``serialize_entity_key``, version 3, for one string join key;
- value: a serialized ``feast.types.Value`` protobuf (string_val or int64_val here);
- event_ts / created_ts: integer seconds, as Feast's registered sqlite3 datetime adapter writes them.

Durability (a deliberate deviation from SQLite's defaults, see docs/serving.md, "Serving speed"): the
database runs in WAL mode with ``synchronous=NORMAL``. A killed process loses nothing that was
committed (the WAL is in the OS's page cache); only an OS crash or power loss can drop the last
commits, never corrupt the file. The online state is rebuildable: the offline tables plus the
prediction log, merged by event id through `mlops features materialize`. The service's own
connections never checkpoint (a checkpoint fsyncs, inside whichever commit crossed SQLite's
threshold); a background thread copies the WAL into the database once a second instead.
"""

from __future__ import annotations

import logging
import sqlite3
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mlops.errors import FeatureStoreError

log = logging.getLogger(__name__)

_STRING_TYPE = 2  # feast.value_type.ValueType.STRING
_STRING_VAL_TAG = (2 << 3) | 2  # Value.string_val: field 2, length-delimited
_INT64_VAL_TAG = (4 << 3) | 0  # Value.int64_val: field 4, varint
_BUSY_TIMEOUT_MS = 10_000  # another process (materialize, a second worker) may hold the write lock
_CHECKPOINT_INTERVAL_S = 1.0


@dataclass(frozen=True)
class OnlineRow:
    """One entity's stored fields in one feature view, as the online store keeps them."""

    view: str
    join_key: str
    entity: str
    fields: Mapping[str, str | int]
    event_time: datetime


def entity_key_bytes(join_key: str, entity: str) -> bytes:
    """Feast's ``serialize_entity_key`` (version 3) of a single string join key."""
    key, value = join_key.encode(), entity.encode()
    return b"".join((struct.pack("<III", 1, _STRING_TYPE, len(key)), key,
                     struct.pack("<II", _STRING_TYPE, len(value)), value))


def _varint(number: int) -> bytes:
    number &= (1 << 64) - 1  # negative int64 values are ten-byte two's complement varints
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        if number:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, offset: int) -> tuple[int, int]:
    number, shift = 0, 0
    while True:
        byte = data[offset]
        number |= (byte & 0x7F) << shift
        offset += 1
        if not byte & 0x80:
            return number, offset
        shift += 7


def encode_value(value: str | int) -> bytes:
    """A serialized ``feast.types.Value`` holding ``value`` as string_val or int64_val."""
    if isinstance(value, str):
        text = value.encode()
        return bytes((_STRING_VAL_TAG,)) + _varint(len(text)) + text
    return bytes((_INT64_VAL_TAG,)) + _varint(value)


def decode_string_value(data: bytes | None) -> str | None:
    """The string_val of a serialized ``feast.types.Value``; None when absent or of another type."""
    if not data:
        return None
    tag, offset = _read_varint(data, 0)
    if tag != _STRING_VAL_TAG:
        return None
    length, offset = _read_varint(data, offset)
    return data[offset:offset + length].decode()


def _feast_seconds(moment: datetime) -> int:
    # Feast stores to_naive_utc(ts) through sqlite3's adapter int(ts.timestamp()); a naive datetime's
    # timestamp() reads it as local time, so do the same to write the very integer Feast writes.
    return int(moment.astimezone(UTC).replace(tzinfo=None).timestamp())


class SqliteOnlineRows:
    """Reads without a lock (a WAL connection per thread); each write call is one transaction.

    A read-modify-write runs inside :meth:`atomically`: one ``BEGIN IMMEDIATE`` transaction holds
    the database's write lock, for every process, from the read to the commit.
    """

    local = True

    def __init__(self, path: Path, project: str) -> None:
        self.path = path
        self.project = project
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        # Threads of this process queue here rather than in SQLite's busy handler, which sleeps.
        self._write_lock = threading.Lock()
        self._written = threading.Event()
        self._stop = threading.Event()
        self._checkpointer: threading.Thread | None = None

    @classmethod
    def from_feast_config(cls, config: Mapping[str, Any]) -> SqliteOnlineRows:
        """From the parsed feature_store.yaml; refuses settings whose layout this module does not write."""
        online = config.get("online_store") or {}
        version = config.get("entity_key_serialization_version", 3)
        registry = config.get("registry")
        versioned = isinstance(registry, Mapping) and registry.get("enable_online_feature_view_versioning")
        if online.get("type") != "sqlite" or version != 3 or online.get("vector_enabled") \
                or online.get("enable_openai_compatible_store") or versioned:
            raise FeatureStoreError("the direct SQLite online path needs feature_store.yaml's plain sqlite store "
                                    f"with entity_key_serialization_version 3 (got {online}, version {version})")
        return cls(Path(online["path"]), str(config["project"]))

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            if not self.path.exists():
                raise FeatureStoreError(f"no online store at {self.path}; run the training pipeline first")
            connection = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                         timeout=_BUSY_TIMEOUT_MS / 1000)
            connection.execute("PRAGMA journal_mode=WAL")  # persistent: Feast's own connection then uses it too
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("PRAGMA wal_autocheckpoint=0")
            self._local.connection = connection
            with self._connections_lock:
                self._connections.append(connection)
        return connection

    def table(self, view: str) -> str:
        return f'"{self.project}_{view}"'

    def read(self, view: str, join_key: str, entities: Sequence[str], field: str) -> list[str | None]:
        """The string ``field`` of each entity (None where the entity has no row)."""
        keys = [entity_key_bytes(join_key, e) for e in entities]
        placeholders = ",".join("?" * len(keys))
        rows = self._connection().execute(
            f"SELECT entity_key, value FROM {self.table(view)} WHERE feature_name = ? "
            f"AND entity_key IN ({placeholders})", (field, *keys)).fetchall()
        found = {bytes(key): decode_string_value(value) for key, value in rows}
        return [found.get(key) for key in keys]

    @contextmanager
    def atomically(self, keys: Iterable[tuple[str, str]]) -> Iterator[None]:
        """Reads and writes of this thread inside form one write transaction (all ``keys`` at once).

        Another process (a second worker, materialize) commits either before the first read or
        after the commit: no update is lost between the read and the write.
        """
        del keys  # SQLite locks the whole database for writing
        with self._transaction():
            yield

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        if getattr(self._local, "in_transaction", False):
            yield
            return
        connection = self._connection()
        with self._write_lock:
            connection.execute("BEGIN IMMEDIATE")
            self._local.in_transaction = True
            try:
                yield
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            finally:
                self._local.in_transaction = False
            connection.execute("COMMIT")
            self._written.set()
            if self._checkpointer is None:
                self._checkpointer = threading.Thread(target=self._checkpoint_every_interval,
                                                      name="online-store-checkpoint", daemon=True)
                self._checkpointer.start()

    def write(self, rows: Sequence[OnlineRow]) -> None:
        """Upsert ``rows`` (any views) in one transaction, as Feast's online_write_batch writes them."""
        created = _feast_seconds(datetime.now(UTC))
        by_table: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            key, seconds = entity_key_bytes(row.join_key, row.entity), _feast_seconds(row.event_time)
            by_table.setdefault(self.table(row.view), []).extend(
                (key, name, encode_value(value), str(value), seconds, created) for name, value in row.fields.items())
        with self._transaction():
            connection = self._connection()
            for table, values in by_table.items():
                connection.executemany(
                    f"INSERT INTO {table} (entity_key, feature_name, value, value_text, event_ts, created_ts) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(entity_key, feature_name) DO UPDATE SET "
                    "value = excluded.value, value_text = excluded.value_text, "
                    "event_ts = excluded.event_ts, created_ts = excluded.created_ts", values)

    def _checkpoint_every_interval(self) -> None:
        connection = sqlite3.connect(self.path, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000)
        try:
            while not self._stop.wait(_CHECKPOINT_INTERVAL_S):
                if self._written.is_set():
                    self._written.clear()
                    try:  # PASSIVE: copies what no reader still needs, never waits for or blocks a writer
                        connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    except sqlite3.Error:  # the WAL only grows until the next interval succeeds
                        log.exception("online store checkpoint failed")
        finally:
            connection.close()

    def close(self) -> None:
        self._stop.set()
        if self._checkpointer is not None:
            self._checkpointer.join()
        with self._connections_lock:
            connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()
