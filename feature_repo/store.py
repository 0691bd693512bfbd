"""The Feast store as the platform uses it: opened from feature_store.yaml with state under home,
the definitions applied after a backfill, the online store materialized from the offline table, and
online rows read and written through Feast's provider (Redis).

feast is imported inside the functions: importing it sets PROMETHEUS_MULTIPROC_DIR and takes
seconds, and the pipeline's modules import this one at their top.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from feature_repo.config import REPO_PATH, store_config
from feature_repo.feast_import import import_feast
from mlops.backfill import engine_for
from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.feature_store import backfill_offline, require_offline
from mlops.online_features import OnlineFeatures
from mlops.redis_locks import RedisEntityLocks
from mlops.settings import Settings
from mlops.sqlite_online import OnlineRow

if TYPE_CHECKING:
    import pandas as pd
    from feast import FeatureStore


def open_store(settings: Settings) -> FeatureStore:
    """A FeatureStore configured from feature_store.yaml with state under home.

    ``MLOPS_ONLINE_STORE=redis`` swaps the embedded SQLite online store for Redis at ``MLOPS_REDIS_URL``.
    """
    import_feast()
    from feast import FeatureStore
    from feast.repo_config import RepoConfig

    raw = store_config(settings)
    settings.feast_dir.mkdir(parents=True, exist_ok=True)
    return FeatureStore(config=RepoConfig(repo_path=REPO_PATH, **raw))


def publish_features(source: Path | pd.DataFrame, contract: DataContract, settings: Settings) -> FeatureStore:
    """Backfill the features of ``source`` (Parquet file/folder, or a frame) into the offline store
    and apply the feature repo.

    Touches the offline files and the registry only: the online store (what production serves)
    changes through `mlops features materialize` and the service's write-through, never here.
    """
    import_feast()  # first: the definitions module imports feast at its top
    from feature_repo.definitions import build_definitions

    offline = backfill_offline(source, contract, settings)
    store = open_store(settings)
    store.apply(build_definitions(contract, offline))
    return store


def materialize_online(settings: Settings, contract: DataContract, end: datetime) -> dict[str, int]:
    """`mlops features materialize`: merge the offline histories as of ``end`` into the online store."""
    offline = require_offline(settings)
    store = open_store(settings)
    online = OnlineFeatures(FeastOnlineRows(store), contract, lateness=settings.late_event_allowance)
    return online.materialize(store, end, offline, engine_for(settings))


def open_feast_online(settings: Settings, contract: DataContract) -> OnlineFeatures:
    """The service's online features in Redis, through Feast, with the entities' locks in Redis."""
    redis_url = settings.resolved_redis_url
    if redis_url is None:  # the settings refuse redis without a URL; narrows the type
        raise ConfigError("MLOPS_ONLINE_STORE=redis needs MLOPS_REDIS_URL", field="redis_url")
    store = open_store(settings)
    locks = RedisEntityLocks(redis_url, f"mlops:{store.project}")
    return OnlineFeatures(FeastOnlineRows(store, locks), contract, lateness=settings.late_event_allowance)


class FeastOnlineRows:
    """Rows through Feast's provider (Redis, and materialize), with the feature views resolved once.

    ``FeatureStore.push`` and ``get_online_features`` rebuild the feature views from the registry's
    protos on every call (13 of the 17 ms a write took); the rows written are what a push of the
    same data writes. Calls are serialized: Feast's SQLite store shares one connection between threads.
    With ``locks`` (Redis), a read-modify-write holds its entities' locks in Redis, for every replica.
    """

    local = False  # Redis: a network round trip per call

    def __init__(self, store: FeatureStore, locks: RedisEntityLocks | None = None) -> None:
        self.store = store
        self.locks = locks
        self.lock = threading.Lock()
        self._feature_views: dict[str, Any] = {}  # resolved on first use: the repo may be applied later

    def feature_view(self, name: str) -> Any:
        """The Feast feature view, read from the registry once (call with the lock held)."""
        if name not in self._feature_views:
            self._feature_views[name] = self.store.get_feature_view(name)
        return self._feature_views[name]

    @staticmethod
    def _entity_key(join_key: str, entity: str) -> Any:
        from feast.protos.feast.types.EntityKey_pb2 import EntityKey
        from feast.protos.feast.types.Value_pb2 import Value

        return EntityKey(join_keys=[join_key], entity_values=[Value(string_val=entity)])

    def read(self, view: str, join_key: str, entities: Sequence[str], field: str) -> list[str | None]:
        keys = [self._entity_key(join_key, e) for e in entities]
        with self.lock:
            answers = self.store._get_provider().online_read(self.store.config, self.feature_view(view), keys, [field])
        texts: list[str | None] = []
        for _, values in answers:
            stored = values.get(field) if values else None
            # SQLite answers None for an unknown entity; Redis an empty Value (no field of the oneof set).
            texts.append(stored.string_val if stored is not None and stored.WhichOneof("val") == "string_val"
                         else None)
        return texts

    def write(self, rows: Sequence[OnlineRow]) -> None:
        from feast.protos.feast.types.Value_pb2 import Value

        now = datetime.now(UTC)
        by_view: dict[str, list[tuple[Any, dict[str, Any], datetime, datetime | None]]] = {}
        for row in rows:
            values = {name: Value(string_val=v) if isinstance(v, str) else Value(int64_val=v)
                      for name, v in row.fields.items()}
            by_view.setdefault(row.view, []).append((self._entity_key(row.join_key, row.entity), values,
                                                     row.event_time, now))
        with self.lock:
            for view, data in by_view.items():
                self.store._get_provider().online_write_batch(self.store.config, self.feature_view(view), data,
                                                              progress=None)

    def atomically(self, keys: Iterable[tuple[str, str]]) -> AbstractContextManager[None]:
        return nullcontext() if self.locks is None else self.locks.holding(keys)

    def close(self) -> None:
        """The lock client only: the FeatureStore owns its connections."""
        if self.locks is not None:
            self.locks.close()
