"""The process's MLflow client: one :class:`Registry` per set of stores, built on first use.

MlflowClient takes its tracking and registry URIs directly, so client calls need no process-wide
state. Two things are process-wide all the same: MLflow reads its HTTP retry and timeout limits
from the environment on every request (it has no API for them), so they are written once, when the
Registry is built; and MLflow's fluent API (start_run, log_*, register_model) reads the global
tracking URI, which :func:`activate` sets once for the code that logs that way (training,
evaluation, the drift job). Credentials for an MLflow server with authentication come from the
settings (MLOPS_TRACKING_USERNAME with MLOPS_TRACKING_PASSWORD or MLOPS_TRACKING_PASSWORD_FILE) and
are handed to MLflow as its own MLFLOW_TRACKING_USERNAME/PASSWORD, in this process's environment
only (never a command line); MLflow's other variables (MLFLOW_TRACKING_TOKEN, ...) still work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlops.preflight import check_tracking_store
from mlops.settings import Settings
from mlops.store_location import check_home_location

if TYPE_CHECKING:
    from mlflow import MlflowClient


@dataclass(frozen=True)
class Registry:
    """A client bound to one tracking store and one model registry."""

    tracking_uri: str
    registry_uri: str
    client: MlflowClient

    def download(self, dst_path: Path, *, artifact_uri: str | None = None, run_id: str | None = None,
                 artifact_path: str | None = None) -> Path:
        """Download a run's artifacts or a ``models:/`` URI from these stores (not the global ones)."""
        import mlflow

        return Path(mlflow.artifacts.download_artifacts(
            artifact_uri=artifact_uri, run_id=run_id, artifact_path=artifact_path, dst_path=str(dst_path),
            tracking_uri=self.tracking_uri, registry_uri=self.registry_uri))

    def download_version(self, name: str, version: str, dst_path: Path) -> Path:
        """Download a registered version's files from where this registry says they are.

        Resolved here, not through a ``models:/`` URI: MLflow resolves those in the global registry.
        """
        return self.download(dst_path, artifact_uri=self.client.get_model_version_download_uri(name, version))


# One Registry per (stores, HTTP limits); a process normally has one settings, so one entry.
_built: dict[tuple[str, str, int, float], Registry] = {}


def connect(settings: Settings) -> Registry:
    """The Registry of the settings' stores, built on the first call.

    A tracking URI set explicitly must name a store that exists (RegistryError otherwise): only
    ``mlops init`` and the embedded home's first use create one. Checked on every call, as the
    home's location is: a store can vanish while the process runs, and MLflow would make a new one.
    """
    if settings.tracking_uri:
        check_tracking_store(settings.tracking_uri)
    check_home_location(settings)  # a copied home would read the original's artifacts
    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    tracking_uri = settings.resolved_tracking_uri
    credentials = settings.tracking_credentials
    if credentials is not None:  # MLflow reads them from the environment on every request
        os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = credentials
    key = (tracking_uri, settings.registry_uri or tracking_uri, settings.tracking_http_retries,
           settings.tracking_http_timeout_s)
    built = _built.get(key)
    if built is None:
        from mlflow import MlflowClient

        # Short by default: an outage is reported in seconds, not after MLflow's minutes of retries.
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(settings.tracking_http_retries)
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = f"{settings.tracking_http_timeout_s:g}"
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")  # an int: MLflow refuses 0.5
        built = _built[key] = Registry(key[0], key[1], MlflowClient(tracking_uri=key[0], registry_uri=key[1]))
    return built


def activate(settings: Settings) -> Registry:
    """Point MLflow's fluent API (start_run, log_*, register_model) at the settings' stores.

    Sets the global URIs only when they name other stores, so a process sets them once.
    """
    import mlflow

    registry = connect(settings)
    if mlflow.get_tracking_uri() != registry.tracking_uri:
        mlflow.set_tracking_uri(registry.tracking_uri)
    if mlflow.get_registry_uri() != registry.registry_uri:
        mlflow.set_registry_uri(registry.registry_uri)
    return registry
