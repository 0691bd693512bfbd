"""feature_store.yaml as Feast reads it for the settings, without importing feast: the service's
SQLite path reads the online store from this configuration directly (:mod:`mlops.sqlite_online`)."""

from __future__ import annotations

from pathlib import Path
from string import Template
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from mlops.settings import Settings

REPO_PATH = Path(__file__).resolve().parent  # the Feast repository: this package's folder


def store_config(settings: Settings) -> dict[str, Any]:
    """feature_store.yaml for ``settings``: state under home, Redis when chosen."""
    template = Template((REPO_PATH / "feature_store.yaml").read_text())
    raw: dict[str, Any] = yaml.safe_load(template.substitute(FEAST_DIR=str(settings.feast_dir)))
    redis_url = settings.resolved_redis_url
    if settings.online_store == "redis" and redis_url is not None:
        # skip_dedup: Feast would drop a write whose newest event time is not newer than the stored one
        # (an older event appended, two events in one microsecond); the histories are merged already.
        raw["online_store"] = {"type": "redis", "skip_dedup": True,
                               "connection_string": redis_connection_string(redis_url)}
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
