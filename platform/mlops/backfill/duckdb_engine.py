"""The embedded backfill engine: DuckDB, out of core, memory bounded.

One SQL statement reads the raw Parquet, computes every feature with window functions
(:mod:`mlops.backfill.window_sql`) and writes Parquet; DuckDB sorts and spills to a temporary
folder beside the output, so memory stays under the limit ``Settings.duckdb_memory_limit`` sets
whatever the data's size, and no row ever becomes a Python object.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from mlops.backfill.window_sql import EVENT_FLAG, TIME_COLUMN, feature_selects, quoted
from mlops.contract import DataContract
from mlops.errors import InputError

if TYPE_CHECKING:
    import duckdb

# Opening an in-memory DuckDB costs 13-19 ms (its catalog, its thread pool), and the engine runs many
# small queries (a materialization per view, a point-in-time lookup per batch): each use borrows the
# process's idle database through a cursor of its own (its registered frames and temporary objects end
# with it), with the memory limit and spill folder set for that use. A database that has spilled keeps
# its spill folder (DuckDB refuses to switch it), so it is closed and a fresh one opened. An idle
# database is held to a small memory limit: DuckDB's allocator keeps what a use freed (840 MB after a
# 20 M-row sort) until the limit drops, which the pipeline's next step in the same process would
# otherwise pay. Databases are closed before the process forks: a child must not inherit one's threads.
_idle: list[duckdb.DuckDBPyConnection] = []
_idle_lock = threading.Lock()
_IDLE_MEMORY_LIMIT = "32MB"


def _close_idle() -> None:
    with _idle_lock:
        while _idle:
            _idle.pop().close()


os.register_at_fork(before=_close_idle)


def _release(database: duckdb.DuckDBPyConnection) -> None:
    """Back to the idle list with its freed memory returned (closed instead if one is idle already,
    or if it cannot drop its limit)."""
    import duckdb

    try:
        database.execute(f"SET memory_limit = '{_IDLE_MEMORY_LIMIT}'")
    except duckdb.Error:
        database.close()
        return
    with _idle_lock:
        kept = not _idle
        if kept:
            _idle.append(database)
    if not kept:
        database.close()


def _configured(spill_dir: Path, memory_limit: str) -> duckdb.DuckDBPyConnection:
    import duckdb

    with _idle_lock:
        database = _idle.pop() if _idle else None
    folder = str(spill_dir).replace("'", "''")
    if database is not None:
        try:
            database.execute(f"SET temp_directory = '{folder}'")
        except duckdb.NotImplementedException:  # it spilled: its folder is fixed
            database.close()
            database = None
    if database is None:
        database = duckdb.connect(config={"threads": os.cpu_count() or 1, "preserve_insertion_order": False,
                                          "temp_directory": str(spill_dir)})
    try:
        database.execute("SET memory_limit = ?", [memory_limit])
    except duckdb.Error:
        database.close()
        raise
    return database


@contextmanager
def connection(spill_dir: Path, memory_limit: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB using at most ``memory_limit`` (sorts and windows spill beyond it; the
    process adds Python and Arrow on top), spilling under ``spill_dir`` (removed afterwards)."""
    spill_dir.mkdir(parents=True, exist_ok=True)
    database = _configured(spill_dir, memory_limit)
    cursor = database.cursor()
    reusable = False
    try:
        yield cursor
        reusable = True
    finally:
        cursor.close()
        shutil.rmtree(spill_dir, ignore_errors=True)
        if reusable:
            _release(database)
        else:
            database.close()


def parquet_scan(source: Path) -> str:
    """A ``read_parquet`` of a file or of every Parquet file under a folder."""
    if not source.exists():
        raise InputError(f"no Parquet data at {source}", field="source")
    pattern = str(source / "**" / "*.parquet") if source.is_dir() else str(source)
    return "read_parquet('" + pattern.replace("'", "''") + "')"


def timed_rows(contract: DataContract, relation: str) -> str:
    """``relation`` with its event time in microseconds added as ``__t_us``."""
    moment = quoted(contract.timestamp_column)
    return f"SELECT *, epoch_us(CAST({moment} AS TIMESTAMPTZ)) AS {TIME_COLUMN} FROM {relation}"


def check_columns(present: set[str], needed: list[str]) -> None:
    missing = [c for c in needed if c not in present]
    if missing:
        raise InputError(f"the data has no column(s) {', '.join(missing)}", field=missing[0])


def needed_columns(contract: DataContract) -> list[str]:
    """The raw columns the features read: id, time, every entity key and aggregated column (the
    label too when a label feature aggregates it)."""
    keys = [contract.entity(v.entity).join_key for v in contract.feature_views]
    values = [c for v in contract.feature_views for c in (*v.value_columns, *v.text_columns)]
    values += [contract.label_column] if any(v.uses_labels for v in contract.feature_views) else []
    return list(dict.fromkeys([contract.id_column, contract.timestamp_column, *keys, *values]))


def current_value_columns(contract: DataContract) -> list[str]:
    """The columns whose own value of a row (or a request) some feature compares with its window."""
    return sorted({c for v in contract.feature_views for c in v.current_value_columns})


def backfill_duckdb(source: Path, out: Path, contract: DataContract, memory_limit: str) -> None:
    """Every row of ``source`` with its point-in-time features (float64, contract names) into ``out``.

    Data without the label column (transactions to score) is read as labels not delivered yet: the
    label features skip them, as the service skips labels it has not been given; the stand-in column
    is not written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with connection(out.parent / f".{out.name}.spill", memory_limit) as con:
        scan = parquet_scan(source)
        present = {row[0] for row in con.sql(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
        excluded = [TIME_COLUMN]
        if contract.label_column not in present and any(v.uses_labels for v in contract.feature_views):
            label = quoted(contract.label_column)
            scan = f"(SELECT *, CAST(NULL AS DOUBLE) AS {label} FROM {scan})"
            present.add(contract.label_column)
            excluded.append(label)
        check_columns(present, needed_columns(contract))
        select = ", ".join(feature_selects(contract))
        target = str(out).replace("'", "''")
        con.execute(f"COPY (SELECT * EXCLUDE ({', '.join(excluded)}), {select} FROM ({timed_rows(contract, scan)})) "
                    f"TO '{target}' (FORMAT parquet, ROW_GROUP_SIZE 122880)")


def features_at(contract: DataContract, events: str, queries: str) -> str:
    """SQL: per row of ``queries`` (its ``__query`` number, entity keys and time), its features
    against the rows of ``events``, as ``__query`` plus one column per feature.

    A query row is never counted as an event, so a moment the events table does not hold (a live
    request) gets the features the entity's history gave at that moment. ``queries`` also carries
    :func:`current_value_columns` (a request's own values, which ``ratio_to_mean`` and ``zscore`` compare).
    """
    names = needed_columns(contract)[1:]  # the id plays no part in a feature
    keys = {contract.timestamp_column, *(contract.entity(v.entity).join_key for v in contract.feature_views),
            *current_value_columns(contract)}
    event_columns = ", ".join(quoted(c) for c in names)
    query_columns = ", ".join(quoted(c) if c in keys else f"NULL AS {quoted(c)}" for c in names)
    union = (f"SELECT {event_columns}, TRUE AS {EVENT_FLAG}, NULL::BIGINT AS __query FROM {events} "
             f"UNION ALL SELECT {query_columns}, FALSE, __query FROM {queries}")
    select = ", ".join(feature_selects(contract, events_only=True))
    return (f"SELECT __query, {select} FROM ({timed_rows(contract, f'({union})')}) "
            f"QUALIFY NOT {EVENT_FLAG}")
