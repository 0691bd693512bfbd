"""The Feast store as the platform uses it: open, publish the offline history tables, and the
point-in-time join that gives every training row the entity histories serving would have seen.

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
from mlops.errors import FeatureStoreError
from mlops.features import (
    EVENTS_FIELD,
    NEWEST_FIELD,
    History,
    build_history_table,
    compute_features,
    decode_history,
)
from mlops.settings import Settings

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureStore

_ROW = "__row__"


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


def history_column(view_name: str, field: str = EVENTS_FIELD) -> str:
    """The column Feast names a view's field in its answers (full feature names)."""
    return f"{view_name}__{field}"


def publish_features(frame: pd.DataFrame, contract: DataContract, settings: Settings) -> FeatureStore:
    """Write the offline history tables from raw transactions and apply the feature repo.

    Touches the offline files and the registry only: the online store (what production serves)
    changes through `mlops features materialize` and the service's write-through, never here.
    """
    from feature_repo.definitions import build_definitions

    offline_dir(settings).mkdir(parents=True, exist_ok=True)
    for view in contract.feature_views:
        build_history_table(frame, contract, view).to_parquet(offline_table_path(settings, view.view_name),
                                                              index=False)
    store = open_store(settings)
    store.apply(build_definitions(contract, offline_dir(settings)))
    return store


def offline_table_path(settings: Settings, view_name: str) -> Path:
    from feature_repo.definitions import offline_path

    return offline_path(offline_dir(settings), view_name)


def read_offline_tables(settings: Settings, contract: DataContract) -> dict[str, pd.DataFrame]:
    """The offline history table of every view, as the last preprocess wrote it."""
    import pandas as pd

    tables = {}
    for view in contract.feature_views:
        path = offline_table_path(settings, view.view_name)
        if not path.exists():
            raise FeatureStoreError(f"no offline features at {path}; run the training pipeline first")
        tables[view.view_name] = pd.read_parquet(path)
    return tables


def point_in_time_histories(store: FeatureStore, entity_df: pd.DataFrame, contract: DataContract,
                            tables: dict[str, pd.DataFrame]) -> list[dict[str, History]]:
    """For each row of ``entity_df`` (join keys + timestamp), the histories as of its timestamp.

    Feast's point-in-time join picks, per row and view, the offline history row in force at that
    time; it returns that row's key (entity, newest event time), and the history is read from
    ``tables`` (the same offline tables). An entity with no row by then gets an empty history.
    """
    import pandas as pd

    ts = contract.timestamp_column
    moments = pd.to_datetime(entity_df[ts], utc=True)
    per_view: dict[str, list[History]] = {}
    for view in contract.feature_views:
        key = contract.entity(view.entity).join_key
        newest = _newest_event_as_of(store, view.view_name, key, entity_df[key].astype(str), moments, ts)
        table = tables[view.view_name]
        row_keys = zip(table[key].astype(str), table[NEWEST_FIELD].astype("int64"), strict=True)
        stored = dict(zip(row_keys, table[EVENTS_FIELD], strict=True))
        histories = []
        for entity, when in zip(entity_df[key].astype(str), newest, strict=True):
            if when is None:
                histories.append(decode_history(view, None))
                continue
            text = stored.get((entity, when))
            if text is None:
                raise FeatureStoreError(f"{view.view_name}: the offline table has no history row for "
                                        f"{key}={entity} at {when} µs that the store joined")
            histories.append(decode_history(view, text))
        per_view[view.view_name] = histories
    return [{name: per_view[name][i] for name in per_view} for i in range(len(entity_df))]


def _newest_event_as_of(store: FeatureStore, view_name: str, key: str, entities: pd.Series,
                        moments: pd.Series, ts: str) -> list[int | None]:
    """Per row, the key (newest event, µs) of the entity's history row in force at its moment.

    One view per query: Feast drops entity rows that share this view's join key and timestamp,
    so each query asks for distinct (entity, moment) pairs of one view only and maps them back.
    """
    import pandas as pd

    wanted = pd.DataFrame({key: entities.to_numpy(), ts: moments.to_numpy()})
    request = wanted.drop_duplicates().reset_index(drop=True)
    request[_ROW] = range(len(request))
    answer = store.get_historical_features(entity_df=request, features=[f"{view_name}:{NEWEST_FIELD}"],
                                           full_feature_names=True).to_df()
    if len(answer) != len(request) or set(answer[_ROW]) != set(request[_ROW]):
        raise FeatureStoreError(f"feature store answered {len(answer)} rows for {len(request)} "
                                f"entity rows of {view_name}")
    column = answer.set_index(_ROW)[history_column(view_name, NEWEST_FIELD)]
    newest_by_pair = {
        (entity, moment): None if pd.isna(when) else int(when)
        for entity, moment, when in zip(request[key], request[ts], column.loc[request[_ROW]], strict=True)
    }
    return [newest_by_pair[pair] for pair in zip(wanted[key], wanted[ts], strict=True)]


def training_features(store: FeatureStore, frame: pd.DataFrame, contract: DataContract,
                      tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """``frame`` plus its point-in-time features, same rows in the same order.

    Each row's features aggregate the entity's events strictly before its own timestamp.
    """
    import pandas as pd

    ts = contract.timestamp_column
    histories = point_in_time_histories(store, frame, contract, tables)
    moments = pd.to_datetime(frame[ts], utc=True)
    rows = [compute_features(contract, h, t) for h, t in zip(histories, moments, strict=True)]
    features = pd.DataFrame.from_records(rows, columns=contract.feature_names, index=frame.index)
    return pd.concat([frame, features.astype("float64")], axis=1)
