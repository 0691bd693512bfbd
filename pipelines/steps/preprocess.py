"""Preprocess: backfill every transaction's point-in-time features into Feast's offline store, and
split by time. Columnar from end to end (DuckDB, out of core): no row becomes a Python object, so
memory is bounded by the engine's limit, not by the data. The online store is left alone: what
production serves changes only through `mlops features materialize` and the service's
write-through, never through a training run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict

from feature_repo.store import publish_features
from mlops.backfill.duckdb_engine import connection, parquet_scan, timed_rows
from mlops.backfill.window_sql import TIME_COLUMN, quoted
from mlops.contract import DataContract
from mlops.feature_store import offline_features_path
from mlops.settings import Settings

SPLITS = ("train", "validation", "test")


class SplitSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    rows: int
    positives: int
    start: str
    end: str


def split_sizes(n: int, contract: DataContract) -> dict[str, int]:
    """Rows per split: the newest ``test_fraction`` test, the ``validation_fraction`` before it validation."""
    n_test = round(n * contract.split.test_fraction)
    n_val = round(n * contract.split.validation_fraction)
    n_train = n - n_val - n_test
    if min(n_train, n_val, n_test) < 1:
        raise ValueError(f"{n} rows are too few to split into train/validation/test")
    return {"train": n_train, "validation": n_val, "test": n_test}


def time_split(frame: pd.DataFrame, contract: DataContract) -> dict[str, pd.DataFrame]:
    """Oldest rows train, then validation, newest test; no row of a later split precedes an earlier one."""
    ordered = frame.sort_values([contract.timestamp_column, contract.id_column], kind="stable")
    parts, start = {}, 0
    for name, size in split_sizes(len(ordered), contract).items():
        parts[name] = ordered.iloc[start:start + size].reset_index(drop=True)
        start += size
    return parts


def split_file(source: Path, contract: DataContract, out_dir: Path, memory_limit: str) -> list[SplitSummary]:
    """:func:`time_split` of a Parquet table into ``<split>.parquet`` files, without loading it."""
    row_id, label = quoted(contract.id_column), quoted(contract.label_column)
    rows = f"({timed_rows(contract, parquet_scan(source))})"
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = []
    with connection(out_dir / ".split.spill", memory_limit) as con:
        [(n,)] = con.sql(f"SELECT count(*) FROM {rows}").fetchall()
        sizes = split_sizes(n, contract)
        # The (time, id) of each split's last row: a sort of two columns, then one filter per split.
        ranked = f"SELECT {TIME_COLUMN} AS t, {row_id} AS id, row_number() OVER (ORDER BY {TIME_COLUMN}, {row_id}) AS r"
        cuts = [sizes["train"], sizes["train"] + sizes["validation"]]
        bounds = dict(con.sql(f"SELECT r, (t, id) FROM ({ranked} FROM {rows}) "
                              f"WHERE r IN ({cuts[0]}, {cuts[1]})").fetchall())
        after = {"train": None, "validation": bounds[cuts[0]], "test": bounds[cuts[1]]}
        upto = {"train": bounds[cuts[0]], "validation": bounds[cuts[1]], "test": None}
        for name in SPLITS:
            where = " AND ".join([*_beyond(after[name], row_id), *_not_beyond(upto[name], row_id)]) or "TRUE"
            path = out_dir / f"{name}.parquet"
            target = str(path).replace("'", "''")
            con.execute(f"COPY (SELECT * EXCLUDE ({TIME_COLUMN}) FROM {rows} WHERE {where} "
                        f"ORDER BY {TIME_COLUMN}, {row_id}) TO '{target}' (FORMAT parquet)")
            [(count, positives, first, last)] = con.sql(
                f"SELECT count(*), coalesce(sum({label}), 0), min({TIME_COLUMN}), max({TIME_COLUMN}) "
                f"FROM ({timed_rows(contract, parquet_scan(path))})").fetchall()
            summaries.append(SplitSummary(name=name, path=str(path), rows=count, positives=int(positives),
                                          start=str(_stamp(first)), end=str(_stamp(last))))
    return summaries


def _beyond(bound: tuple[int, str] | None, row_id: str) -> list[str]:
    if bound is None:
        return []
    t, event_id = bound
    return [f"({TIME_COLUMN} > {t} OR ({TIME_COLUMN} = {t} AND {row_id} > '{_sql_text(event_id)}'))"]


def _not_beyond(bound: tuple[int, str] | None, row_id: str) -> list[str]:
    if bound is None:
        return []
    t, event_id = bound
    return [f"({TIME_COLUMN} < {t} OR ({TIME_COLUMN} = {t} AND {row_id} <= '{_sql_text(event_id)}'))"]


def _sql_text(value: str) -> str:
    return str(value).replace("'", "''")


def _stamp(micros: int) -> pd.Timestamp:
    return pd.Timestamp(micros, unit="us", tz="UTC")


def preprocess(snapshot_path: Path, contract: DataContract, settings: Settings,
               out_dir: Path) -> list[SplitSummary]:
    """Write train/validation/test Parquet files (raw columns + features + label) into out_dir."""
    publish_features(snapshot_path, contract, settings)
    return split_file(offline_features_path(settings), contract, out_dir, settings.duckdb_memory_limit)
