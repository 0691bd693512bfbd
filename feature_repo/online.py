"""The service's online features: the embedded SQLite store read directly, without feast (seconds
of start-up), or Redis through Feast (:mod:`feature_repo.store`, imported only on that path)."""

from __future__ import annotations

from feature_repo.config import store_config
from mlops.contract import DataContract
from mlops.online_features import OnlineFeatures
from mlops.settings import Settings
from mlops.sqlite_online import SqliteOnlineRows


def open_online_features(settings: Settings, contract: DataContract) -> OnlineFeatures:
    """SQLite (``MLOPS_ONLINE_STORE=sqlite``, the default) or Redis, as the settings say."""
    if settings.online_store == "sqlite":
        return OnlineFeatures(SqliteOnlineRows.from_feast_config(store_config(settings)), contract,
                              lateness=settings.late_event_allowance)
    from feature_repo.store import open_feast_online  # feast: seconds to import, the Redis path only

    return open_feast_online(settings, contract)
