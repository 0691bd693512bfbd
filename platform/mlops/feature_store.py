"""The offline feature store: one Parquet table of transactions with their point-in-time features,
written by the columnar backfill (:mod:`mlops.backfill`) and read here with DuckDB; it holds every
event once, never a history per event. Feast (the registry and the online store, histories per
entity) is opened by :mod:`feature_repo.store`, which builds on this module. Training reads the
backfill's table directly rather than through ``get_historical_features``: each training row's
features are its own transaction's, so the point-in-time join would be an identity join on the
transaction id, and Feast's local offline store (dask, in memory) costs minutes and gigabytes at a
million rows (feast#3003).

pandas is imported inside the functions that build frames: importing this module stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mlops.backfill import backfill_features
from mlops.backfill.duckdb_engine import connection, current_value_columns, features_at, parquet_scan
from mlops.backfill.window_sql import quoted
from mlops.contract import DataContract
from mlops.errors import FeatureStoreError, InputError
from mlops.settings import Settings

if TYPE_CHECKING:
    import pandas as pd


def offline_features_path(settings: Settings) -> Path:
    """The offline store: every published transaction (raw columns plus its point-in-time features)."""
    return settings.feast_dir / "data" / "transactions.parquet"


def backfill_offline(source: Path | pd.DataFrame, contract: DataContract, settings: Settings) -> Path:
    """Backfill the features of ``source`` (Parquet file/folder, or a frame) into the offline store;
    its path. Readers see the old table or the new one, never half of one."""
    target = offline_features_path(settings)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.new")
    if isinstance(source, Path):
        backfill_features(source, staged, contract, settings)
    else:
        raw = target.with_name(f".{target.name}.raw")
        source.to_parquet(raw, index=False)
        try:
            backfill_features(raw, staged, contract, settings)
        finally:
            raw.unlink(missing_ok=True)
    staged.replace(target)
    return target


def require_offline(settings: Settings) -> Path:
    path = offline_features_path(settings)
    if not path.exists():
        raise FeatureStoreError(f"no offline features at {path}; run the training pipeline first")
    return path


def offline_features(settings: Settings, contract: DataContract, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (entity keys and a time each) plus their features against the offline store.

    Each row's features aggregate the stored events strictly before its own time, whether or not
    the row itself is stored: what training had for a stored transaction, and what the history
    gave at any other moment. Same rows, same order. A feature comparing the row's own value
    (``ratio_to_mean``, ``zscore``) reads it from ``rows``.
    """
    import pandas as pd

    path = require_offline(settings)
    asked = [contract.timestamp_column, *(e.join_key for e in contract.entities), *current_value_columns(contract)]
    missing = [c for c in asked if c not in rows.columns]
    if missing:
        raise InputError(f"the rows have no column(s) {', '.join(missing)}", field=missing[0])
    queries = rows[asked].assign(__query=range(len(rows)))
    with connection(settings.feast_dir / ".query.spill", settings.duckdb_memory_limit) as con:
        con.register("queries", queries)
        answer = con.sql(features_at(contract, parquet_scan(path), "queries") + " ORDER BY __query").df()
    features = answer[contract.feature_names].astype("float64").set_axis(rows.index)
    enriched: pd.DataFrame = pd.concat([rows, features], axis=1)
    return enriched


def offline_end(settings: Settings, contract: DataContract) -> pd.Timestamp | None:
    """The newest event time in the offline store (None when it holds no rows)."""
    import pandas as pd

    path = require_offline(settings)
    with connection(settings.feast_dir / ".query.spill", settings.duckdb_memory_limit) as con:
        [(newest,)] = con.sql(f"SELECT max(epoch_us(CAST({quoted(contract.timestamp_column)} AS TIMESTAMPTZ))) "
                              f"FROM {parquet_scan(path)}").fetchall()
    return None if newest is None else pd.Timestamp(newest, unit="us", tz="UTC")
