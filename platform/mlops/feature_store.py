"""The Feast store as the platform uses it: open it, publish the offline features, and read the
offline features of any rows at their own moments.

The offline store is one Parquet table of transactions with their point-in-time features, written
by the columnar backfill (:mod:`mlops.backfill`); it holds every event once, never a history per
event. Feast stays the registry and the online store (histories per entity, see
:mod:`mlops.online_features`). Training reads the backfill's table directly rather than through
``get_historical_features``: each training row's features are its own transaction's, so the
point-in-time join would be an identity join on the transaction id, and Feast's local offline store
(dask, in memory) costs minutes and gigabytes at a million rows (feast#3003).

feast is imported lazily: importing it sets PROMETHEUS_MULTIPROC_DIR and takes seconds. pandas too:
the prediction service reads only :func:`store_config` from here.
"""

from __future__ import annotations

from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import yaml

from mlops.contract import DataContract
from mlops.errors import FeatureStoreError, InputError
from mlops.settings import Settings

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureStore


def feature_repo_path() -> Path:
    """The installed feature_repo package (works from a wheel as well as from the source tree)."""
    import feature_repo

    return Path(feature_repo.__file__).parent


def open_store(settings: Settings) -> FeatureStore:
    """A FeatureStore configured from feature_repo/feature_store.yaml with state under home.

    ``MLOPS_ONLINE_STORE=redis`` swaps the embedded SQLite online store for Redis at ``MLOPS_REDIS_URL``.
    """
    from feast import FeatureStore
    from feast.repo_config import RepoConfig

    raw = store_config(settings)
    settings.feast_dir.mkdir(parents=True, exist_ok=True)
    return FeatureStore(config=RepoConfig(repo_path=feature_repo_path(), **raw))


def store_config(settings: Settings) -> dict[str, Any]:
    """feature_store.yaml as Feast reads it for ``settings`` (state under home, Redis when chosen)."""
    template = Template((feature_repo_path() / "feature_store.yaml").read_text())
    raw: dict[str, Any] = yaml.safe_load(template.substitute(FEAST_DIR=str(settings.feast_dir)))
    if settings.online_store == "redis" and settings.redis_url is not None:
        # skip_dedup: Feast would drop a write whose newest event time is not newer than the stored one
        # (an older event appended, two events in one microsecond); the histories are merged already.
        raw["online_store"] = {"type": "redis", "skip_dedup": True,
                               "connection_string": redis_connection_string(settings.redis_url.get_secret_value())}
    return raw


def redis_connection_string(url: str) -> str:
    """``redis://[user:password@]host:port/db`` as Feast's ``host:port,db=N[,username=..,password=..,ssl=true]``."""
    parts = urlsplit(url)
    options = [f"{parts.hostname}:{parts.port or 6379}", f"db={parts.path.strip('/') or 0}"]
    if parts.username:
        options.append(f"username={unquote(parts.username)}")
    if parts.password:
        options.append(f"password={unquote(parts.password)}")
    if parts.scheme == "rediss":
        options.append("ssl=true")
    return ",".join(options)


def offline_dir(settings: Settings) -> Path:
    return settings.feast_dir / "data"


def offline_features_path(settings: Settings) -> Path:
    """The offline store: every published transaction with its point-in-time features."""
    from feature_repo.definitions import offline_path

    return offline_path(offline_dir(settings))


def publish_features(source: Path | pd.DataFrame, contract: DataContract, settings: Settings) -> FeatureStore:
    """Backfill the features of ``source`` (Parquet file/folder, or a frame) into the offline store
    and apply the feature repo.

    Touches the offline files and the registry only: the online store (what production serves)
    changes through `mlops features materialize` and the service's write-through, never here.
    """
    from feature_repo.definitions import build_definitions
    from mlops.backfill import backfill_features

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
    staged.replace(target)  # readers see the old table or the new one, never half of one
    store = open_store(settings)
    store.apply(build_definitions(contract, offline_dir(settings)))
    return store


def require_offline(settings: Settings) -> Path:
    path = offline_features_path(settings)
    if not path.exists():
        raise FeatureStoreError(f"no offline features at {path}; run the training pipeline first")
    return path


def offline_features(settings: Settings, contract: DataContract, rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (entity keys and a time each) plus their features against the offline store.

    Each row's features aggregate the stored events strictly before its own time, whether or not
    the row itself is stored: what training had for a stored transaction, and what the history
    gave at any other moment. Same rows, same order.
    """
    import pandas as pd

    from mlops.backfill.duckdb_engine import connection, features_at, parquet_scan

    path = require_offline(settings)
    missing = [c for c in [contract.timestamp_column, *(e.join_key for e in contract.entities)]
               if c not in rows.columns]
    if missing:
        raise InputError(f"the rows have no column(s) {', '.join(missing)}", field=missing[0])
    queries = rows[[contract.timestamp_column, *(e.join_key for e in contract.entities)]].assign(
        __query=range(len(rows)))
    with connection(settings.feast_dir / ".query.spill") as con:
        con.register("queries", queries)
        answer = con.sql(features_at(contract, parquet_scan(path), "queries") + " ORDER BY __query").df()
    features = answer[contract.feature_names].astype("float64").set_axis(rows.index)
    enriched: pd.DataFrame = pd.concat([rows, features], axis=1)
    return enriched


def offline_end(settings: Settings, contract: DataContract) -> pd.Timestamp | None:
    """The newest event time in the offline store (None when it holds no rows)."""
    import pandas as pd

    from mlops.backfill.duckdb_engine import connection, parquet_scan
    from mlops.backfill.window_sql import quoted

    path = require_offline(settings)
    with connection(settings.feast_dir / ".query.spill") as con:
        [(newest,)] = con.sql(f"SELECT max(epoch_us(CAST({quoted(contract.timestamp_column)} AS TIMESTAMPTZ))) "
                              f"FROM {parquet_scan(path)}").fetchall()
    return None if newest is None else pd.Timestamp(newest, unit="us", tz="UTC")
