"""Each entity's newest state from the offline table: the history the online store holds after
the entity's events up to a moment, computed in DuckDB and streamed a batch of entities at a time.

A history keeps the events of the view's horizon before its newest event plus those of the
instant just before the newest (see :mod:`mlops.features`); this selects exactly those rows, in
(time, id) order, so no Python object ever holds more than one batch of entities.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from mlops.backfill.duckdb_engine import connection, parquet_scan, timed_rows
from mlops.backfill.window_sql import TIME_COLUMN, quoted, text_sql
from mlops.contract import DataContract, FeatureViewSpec
from mlops.features import to_micros
from mlops.histories import History, kept_from

_MICROS = 1_000_000
_FETCH_ROWS = 100_000
LABEL = "__label"
TEXT = "__text_"  # the view's text columns, numbered
PRUNED = "__pruned"  # whether the entity has older events than the kept ones


def latest_state_sql(contract: DataContract, view: FeatureViewSpec, source: str, end_us: int,
                     start_us: int | None, lateness_us: int = 0) -> str:
    """SQL: the kept events (key, time, id, values) of every entity with an event in (start, end]: as
    :func:`mlops.histories.kept_from` keeps them, the lateness allowance included."""
    key, row_id = quoted(contract.entity(view.entity).join_key), quoted(contract.id_column)
    values = "".join(f", CAST({quoted(c)} AS DOUBLE) AS {quoted(c)}" for c in view.value_columns)
    values += "".join(f", {text_sql(contract, c)} AS {TEXT}{i}" for i, c in enumerate(view.text_columns))
    if view.uses_labels:  # offline every label is known
        values += f", CAST({quoted(contract.label_column)} AS DOUBLE) AS {LABEL}"
    horizon = int(view.history_horizon.total_seconds() * _MICROS)
    cut = f"least(coalesce(previous.previous, newest.newest), newest.newest - {horizon + lateness_us})"
    touched = "" if start_us is None else f" HAVING max(t) > {start_us}"
    return f"""
        WITH ev AS (SELECT {key} AS k, {TIME_COLUMN} AS t, CAST({row_id} AS VARCHAR) AS id{values}
                    FROM ({timed_rows(contract, source)}) WHERE {TIME_COLUMN} <= {end_us}),
             newest AS (SELECT k, max(t) AS newest, min(t) AS oldest FROM ev GROUP BY k{touched}),
             previous AS (SELECT ev.k, max(ev.t) AS previous FROM ev JOIN newest USING (k)
                          WHERE ev.t < newest.newest GROUP BY ev.k)
        SELECT ev.*, newest.oldest < {cut} AS {PRUNED} FROM ev JOIN newest USING (k) LEFT JOIN previous USING (k)
        WHERE ev.t >= {cut}
        ORDER BY ev.k, ev.t, ev.id"""


def latest_histories(offline: Path, contract: DataContract, view: FeatureViewSpec, end: datetime,
                     start: datetime | None, *, batch: int, memory_limit: str,
                     lateness_us: int = 0) -> Iterator[list[tuple[str, History]]]:
    """(entity, history as of ``end``) of every entity with an event after ``start``, ``batch`` at a
    time, keeping ``lateness_us`` beyond the horizon as the service's write-through does."""
    sql = latest_state_sql(contract, view, parquet_scan(offline), to_micros(end),
                           None if start is None else to_micros(start), lateness_us)
    pending: list[tuple[str, History]] = []
    current: str | None = None
    rows: list[tuple[int, str, tuple[Any, ...], bool]] = []
    kept = [*view.value_columns, *(f"{TEXT}{i}" for i in range(len(view.text_columns))),
            *([LABEL] if view.uses_labels else [])]
    with connection(offline.parent / f".{view.view_name}.spill", memory_limit) as con:
        reader = con.sql(sql).to_arrow_reader(_FETCH_ROWS)
        for chunk in reader:
            columns = chunk.to_pydict()
            value_lists = [columns[c] for c in kept]
            for i, (entity, t, event_id, pruned) in enumerate(zip(columns["k"], columns["t"], columns["id"],
                                                                  columns[PRUNED], strict=True)):
                entity = str(entity)
                if entity != current:
                    if current is not None:
                        pending.append((current, _history(view, rows, lateness_us)))
                        if len(pending) >= batch:
                            yield pending
                            pending = []
                    current, rows = entity, []
                rows.append((t, event_id, tuple(v[i] for v in value_lists), pruned))
    if current is not None:
        pending.append((current, _history(view, rows, lateness_us)))
    if pending:
        yield pending


def _history(view: FeatureViewSpec, rows: list[tuple[int, str, tuple[Any, ...], bool]], lateness_us: int) -> History:
    """A history from (time, id, (*values, *texts, label if the view keeps labels), pruned) rows; a
    NULL label is unknown. Complete from where the query cut when it left older events out."""
    labels = tuple(math.nan if r[2][-1] is None else r[2][-1] for r in rows) if view.uses_labels else ()
    first_text = len(view.value_columns)
    return History(ids=tuple(r[1] for r in rows), times=tuple(r[0] for r in rows),
                   values={c: tuple(r[2][i] for r in rows) for i, c in enumerate(view.value_columns)},
                   labels=labels,
                   texts={c: tuple(r[2][first_text + i] for r in rows) for i, c in enumerate(view.text_columns)},
                   complete_from=kept_from(view, [r[0] for r in rows], lateness_us) if rows[0][3] else None)
