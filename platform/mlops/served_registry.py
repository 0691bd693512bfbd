"""What a prediction service reads from the model registry, read without the MLflow package where the
store allows it.

A service asks three things, every poll: which version an alias holds, whether a canary runs (its
version and share), and a version's graph. Through MLflow's client that costs the whole MLflow
package in the serving process (half its memory, 2-3 s of its start; docs/performance.md). So the
reads sit behind one interface with three engines, chosen by the tracking URI:

- :class:`SqliteServedRegistry` for the embedded store (``sqlite:///...``, the default): read-only
  SQL on the tables MLflow's own store reads for these calls (aliases, model versions, metrics),
  a version's files copied from the ``file:`` location it records. The schema is MLflow's: the
  reader knows the migration it was written against (:data:`KNOWN_SCHEMA`) and hands any other
  store to MLflow's client rather than guess;
- :class:`RestServedRegistry` for an MLflow tracking server (``http(s)://``): its REST API and its
  artifact proxy (``mlflow-artifacts:``) through httpx, with the settings' credentials or
  ``MLFLOW_TRACKING_TOKEN``;
- :class:`MlflowServedRegistry`, MLflow's client (:mod:`mlops.registry`), for every other store, a
  separate registry URI, files in an object store, or a server reached with MLflow's TLS or auth
  plugin variables.

All fail closed alike: a missing model or alias is "none", a missing version NotFoundError, and
anything else (a missing or locked store, an unreadable table, a server's error or an answer that is
not MLflow's) RegistryError, never "none".
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from abc import ABC, abstractmethod
from contextlib import closing
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

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

    def close(self) -> None:  # noqa: B027 - most readers hold nothing open between calls
        """Release what the reader holds open (a connection pool); the reader is not used after."""


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
        if not version.isdigit():  # as MLflow's client refuses it: a malformed request, not "no such version"
            raise RegistryError(f"model registry failed reading version {version}: not a version number",
                                field="version")
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


class RestServedRegistry(ServedRegistry):
    """The reads as calls of an MLflow tracking server's REST API (httpx), files through its artifact proxy."""

    def __init__(self, settings: Settings) -> None:
        import httpx

        super().__init__(settings)
        self.base = settings.resolved_tracking_uri.rstrip("/")
        credentials = settings.tracking_credentials
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token and credentials is None else {}
        self._client = httpx.Client(auth=credentials, headers=headers, timeout=settings.tracking_http_timeout_s,
                                    transport=httpx.HTTPTransport(retries=settings.tracking_http_retries))
        self._fallback = MlflowServedRegistry(settings)

    def close(self) -> None:
        self._client.close()

    def _get(self, route: str, **params: str) -> dict[str, Any] | None:
        """The JSON answer of ``GET route``; None for MLflow's "does not exist"; RegistryError otherwise."""
        import httpx

        try:
            answer = self._client.get(f"{self.base}{route}", params=params)
        except httpx.HTTPError as exc:
            raise RegistryError(f"model registry unreachable: {type(exc).__name__}: {exc}") from exc
        if answer.is_success:
            try:
                body = answer.json()
            except ValueError:
                body = None
            if not isinstance(body, dict):  # a proxy's page, say: not an answer of MLflow's
                raise RegistryError(f"model registry failed: {route} answered HTTP {answer.status_code} "
                                    "without MLflow's JSON")
            return body
        code = _error_code(answer.text)
        if code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise RegistryError(f"model registry failed: HTTP {answer.status_code} on {route}: "
                            f"{code or answer.text[:200]}")

    def alias_version(self, alias: str) -> str | None:
        model = self._get("/api/2.0/mlflow/registered-models/get", name=self.model)
        aliases = (model or {}).get("registered_model", {}).get("aliases", [])
        return next((str(a["version"]) for a in aliases if a.get("alias") == alias), None)

    def _run_id(self, version: str) -> str | None:
        found = self._get("/api/2.0/mlflow/model-versions/get", name=self.model, version=version)
        if found is None:
            raise NotFoundError(f"model {self.model} version {version} not found")
        run_id: str | None = found["model_version"].get("run_id") or None
        return run_id

    def canary(self) -> tuple[str, float] | None:
        version = self.alias_version(CANARY_ALIAS)
        if version is None:
            return None
        run_id = self._run_id(version)
        if run_id is None:
            return version, 0.0
        history = self._get("/api/2.0/mlflow/metrics/get-history", run_id=run_id,
                            metric_key=f"{CANARY_METRIC}/{self.model}") or {}
        points = [m for m in history.get("metrics", []) if int(m.get("step", 0)) == int(version)]
        latest = max(points, key=lambda m: int(m["timestamp"]), default=None)
        return version, float(latest["value"]) if latest else 0.0

    def download_version(self, version: str, dest: Path) -> ServedModel:
        run_id = self._run_id(version)
        found = self._get("/api/2.0/mlflow/model-versions/get-download-uri", name=self.model, version=version)
        location = urlsplit(self._resolved(str((found or {}).get("artifact_uri", ""))))
        if location.scheme != "mlflow-artifacts" or location.netloc:
            return self._fallback.download_version(version, dest)  # an object store, another server: MLflow's
        self._download_folder(location.path.strip("/"), dest)
        if not (dest / ONNX_FILE).is_file():
            raise NotFoundError(f"model {self.model} version {version} has no {ONNX_FILE}")
        return ServedModel(self.model, version, run_id, dest / ONNX_FILE)

    def _resolved(self, uri: str) -> str:
        """``runs:/<run>/<path>`` (a version registered from a run's folder) as the run's own artifact URI."""
        parts = urlsplit(uri)
        if parts.scheme != "runs":
            return uri
        run, _, inner = parts.path.strip("/").partition("/")
        found = self._get("/api/2.0/mlflow/runs/get", run_id=run) or {}
        artifacts = str(found.get("run", {}).get("info", {}).get("artifact_uri", ""))
        return f"{artifacts.rstrip('/')}/{inner}" if artifacts and inner else artifacts

    def _download_folder(self, path: str, dest: Path) -> None:
        """Every file under ``path`` of the server's artifact store, into ``dest`` (as MLflow downloads it)."""
        import httpx

        listing = self._get("/api/2.0/mlflow-artifacts/artifacts", path=path) or {}
        dest.mkdir(parents=True, exist_ok=True)
        for entry in listing.get("files", []):
            name = str(entry.get("path", "")).rsplit("/", 1)[-1]
            if name in ("", ".", ".."):  # a listing never names these; written, they would leave ``dest``
                raise RegistryError(f"model registry failed: {path} lists a file named {name!r}")
            if entry.get("is_dir"):
                self._download_folder(f"{path}/{name}", dest / name)
                continue
            route = f"{self.base}/api/2.0/mlflow-artifacts/artifacts/{quote(f'{path}/{name}')}"
            try:
                with self._client.stream("GET", route) as answer, (dest / name).open("wb") as out:
                    answer.raise_for_status()
                    for chunk in answer.iter_bytes():
                        out.write(chunk)
            except httpx.HTTPError as exc:
                raise RegistryError(f"model registry failed reading {path}/{name}: {exc}") from exc


def _error_code(text: str) -> str:
    try:
        return str(json.loads(text).get("error_code", ""))
    except (ValueError, AttributeError):
        return ""


# MLflow's client reads these for TLS and auth plugins; a server reached with any of them is read through it.
_MLFLOW_ONLY = ("MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH", "MLFLOW_TRACKING_CLIENT_CERT_PATH",
                "MLFLOW_TRACKING_AUTH", "MLFLOW_TRACKING_AWS_SIGV4")


def served_registry(settings: Settings) -> ServedRegistry:
    """The reader for the settings' registry: SQL on an embedded store whose schema it knows, the REST API of
    an MLflow server, MLflow's client for anything else."""
    uri = settings.resolved_tracking_uri
    if (settings.registry_uri or uri) != uri:
        return MlflowServedRegistry(settings)
    if uri.startswith(("http://", "https://")):
        if any(os.environ.get(name) for name in _MLFLOW_ONLY):
            return MlflowServedRegistry(settings)
        return RestServedRegistry(settings)
    path = local_store_path(uri) if uri.startswith("sqlite:") else None
    if path is None:
        return MlflowServedRegistry(settings)
    reader = SqliteServedRegistry(settings, path)
    try:
        known = reader.schema() == KNOWN_SCHEMA
    except RegistryError:
        known = True  # an outage now: the SQL reader says so on every read, as MLflow's would
    return reader if known else MlflowServedRegistry(settings)
