"""What a prediction service reads from the model registry, read without the MLflow package where the
store allows it.

A service asks three things, every poll: which version an alias holds, whether a canary runs (its
version and share), and a version's graph. Through MLflow's client that costs the whole MLflow
package in the serving process (half its memory, 2-3 s of its start; docs/performance.md). So the
reads sit behind one interface with two engines, chosen by the tracking URI:

- :class:`SqliteServedRegistry` for the embedded store (``sqlite:///...``, the default): read-only
  SQL on the tables MLflow's own store reads for these calls (aliases, model versions, metrics),
  a version's files copied from the ``file:`` location it records. The schema is MLflow's: the
  reader knows the migration it was written against (:data:`KNOWN_SCHEMA`) and hands any other
  store to MLflow's client rather than guess;
- :class:`MlflowServedRegistry`, MLflow's client (:mod:`mlops.registry`), for every other store.

Both fail closed alike: a missing model or alias is "none", a missing version NotFoundError, and
anything else (a missing or locked store, an unreadable table) RegistryError, never "none".
"""

from __future__ import annotations

import shutil
import sqlite3
from abc import ABC, abstractmethod
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from mlops import registry
from mlops.errors import NotFoundError, RegistryError
from mlops.preflight import local_store_path
from mlops.registry import CANARY_ALIAS, ONNX_FILE, ServedModel
from mlops.registry_records import CANARY_METRIC
from mlops.settings import Settings

# The alembic revision of MLflow's tracking schema these queries were written and tested against.
KNOWN_SCHEMA = "dc11669786a5"
_DELETED = "Deleted_Internal"  # MLflow's stage of a deleted version that keeps its row
_WORKSPACE = "default"  # MLflow's only workspace unless multi-tenancy is switched on


class ServedRegistry(ABC):
    """The registry as a service reads it, for one model."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.model = settings.model_name

    @abstractmethod
    def alias_version(self, alias: str) -> str | None:
        """The version holding ``alias``; None when the model or the alias does not exist."""

    @abstractmethod
    def canary(self) -> tuple[str, float] | None:
        """The canary's version and its percent of the traffic; None when no canary runs."""

    @abstractmethod
    def download_version(self, version: str, dest: Path) -> ServedModel:
        """The version's graph copied under ``dest``; NotFoundError when the version or its graph is missing."""


class MlflowServedRegistry(ServedRegistry):
    """The reads through MLflow's client: any store MLflow reaches."""

    def alias_version(self, alias: str) -> str | None:
        return registry.alias_version(self.settings, alias)

    def canary(self) -> tuple[str, float] | None:
        return registry.canary(self.settings)

    def download_version(self, version: str, dest: Path) -> ServedModel:
        return registry.download_version(self.settings, version, dest)


class SqliteServedRegistry(ServedRegistry):
    """The reads as SQL on the embedded SQLite tracking store, opened read-only per call."""

    def __init__(self, settings: Settings, path: Path) -> None:
        super().__init__(settings)
        self.path = path
        self._fallback = MlflowServedRegistry(settings)

    def _rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if not self.path.is_file():
            raise RegistryError(f"no tracking store at {self.path}: restore it, or create a new one on purpose "
                                "with `mlops init`", field="tracking_uri")
        timeout = self.settings.tracking_http_timeout_s
        try:
            with closing(sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True, timeout=timeout)) as db:
                return db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise RegistryError(f"model registry unreachable: {type(exc).__name__}: {exc} ({self.path})") from exc

    def schema(self) -> str | None:
        """The store's alembic revision (None before MLflow first migrated it)."""
        rows = self._rows("SELECT version_num FROM alembic_version")
        return str(rows[0][0]) if rows else None

    def alias_version(self, alias: str) -> str | None:
        rows = self._rows("SELECT version FROM registered_model_aliases WHERE name = ? AND alias = ? AND workspace = ?",
                          self.model, alias, _WORKSPACE)
        return str(rows[0][0]) if rows else None

    def _version(self, version: str) -> tuple[str | None, str]:
        """The version's run id and where its files are; NotFoundError when it is not registered."""
        rows = self._rows("SELECT run_id, storage_location, source FROM model_versions "
                          "WHERE name = ? AND version = ? AND workspace = ? AND current_stage != ?",
                          self.model, int(version), _WORKSPACE, _DELETED)
        if not rows:
            raise NotFoundError(f"model {self.model} version {version} not found")
        run_id, storage_location, source = rows[0]
        return run_id, storage_location or source

    def canary(self) -> tuple[str, float] | None:
        version = self.alias_version(CANARY_ALIAS)
        if version is None:
            return None
        run_id, _ = self._version(version)
        if not run_id:
            return version, 0.0
        # The share set last (the newest point at the version's step), as mlops.registry_records reads it.
        rows = self._rows("SELECT value FROM metrics WHERE run_uuid = ? AND key = ? AND step = ? "
                          "ORDER BY timestamp DESC LIMIT 1", run_id, f"{CANARY_METRIC}/{self.model}", int(version))
        return version, float(rows[0][0]) if rows else 0.0

    def download_version(self, version: str, dest: Path) -> ServedModel:
        run_id, location = self._version(version)
        parts = urlsplit(location)
        if parts.scheme not in ("", "file"):  # an object store: MLflow's artifact clients reach it
            return self._fallback.download_version(version, dest)
        # The whole folder, as MLflow downloads it: a graph may keep its weights in files beside it.
        try:
            shutil.copytree(Path(unquote(parts.path)), dest, dirs_exist_ok=True)
        except FileNotFoundError:
            pass  # no folder: no graph, said below as for a folder without one
        except OSError as exc:
            raise RegistryError(f"model registry failed reading version {version}: {exc}") from exc
        if not (dest / ONNX_FILE).is_file():
            raise NotFoundError(f"model {self.model} version {version} has no {ONNX_FILE}")
        return ServedModel(self.model, version, run_id, dest / ONNX_FILE)


def served_registry(settings: Settings) -> ServedRegistry:
    """The reader for the settings' registry: SQL on an embedded store MLflow's schema matches, else MLflow."""
    uri = settings.resolved_tracking_uri
    path = local_store_path(uri) if uri.startswith("sqlite:") else None
    if path is None or (settings.registry_uri or uri) != uri:
        return MlflowServedRegistry(settings)
    reader = SqliteServedRegistry(settings, path)
    try:
        known = reader.schema() == KNOWN_SCHEMA
    except RegistryError:
        known = True  # an outage now: the SQL reader says so on every read, as MLflow's would
    return reader if known else MlflowServedRegistry(settings)
