"""MLflow tracking and registry helpers: one place that knows the store, experiment and aliases.

Serving follows ``models:/<name>@<alias>``; the Production stage is moved alongside while MLflow
still has stages, archiving the previous holder.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlops.errors import ModelNotReadyError, NotFoundError
from mlops.settings import Settings

if TYPE_CHECKING:
    from mlflow import MlflowClient

ONNX_FILE = "model.onnx"


@dataclass(frozen=True)
class ServedModel:
    name: str
    version: str
    run_id: str | None
    onnx_path: Path


def client(settings: Settings) -> MlflowClient:
    """A client bound to the settings' stores (sets the process-wide URIs for fluent calls too)."""
    import mlflow

    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(settings.resolved_tracking_uri)
    mlflow.set_registry_uri(settings.registry_uri or settings.resolved_tracking_uri)
    return mlflow.MlflowClient()


def ensure_experiment(settings: Settings) -> str:
    """The experiment id, creating the experiment (artifacts under home) on first use."""
    mlflow_client = client(settings)
    existing = mlflow_client.get_experiment_by_name(settings.experiment)
    if existing is not None:
        return str(existing.experiment_id)
    # A local store keeps artifacts under home; a tracking server decides its own location.
    local = settings.resolved_tracking_uri.startswith(("sqlite:", "file:"))
    location = settings.artifact_root.as_uri() if local else None
    return str(mlflow_client.create_experiment(settings.experiment, artifact_location=location))


def alias_version(settings: Settings) -> str | None:
    """The version number holding the serving alias, or None."""
    from mlflow.exceptions import MlflowException

    mlflow_client = client(settings)
    try:
        version = mlflow_client.get_model_version_by_alias(settings.model_name, settings.serving_alias)
    except MlflowException:
        return None
    return str(version.version)


def download_version(settings: Settings, version: str, dest: Path) -> ServedModel:
    """Download one registered version's ONNX file; raises NotFoundError when it is not there."""
    import mlflow
    from mlflow.exceptions import MlflowException

    mlflow_client = client(settings)
    try:
        model_version = mlflow_client.get_model_version(settings.model_name, version)
        local = mlflow.artifacts.download_artifacts(
            artifact_uri=f"models:/{settings.model_name}/{version}", dst_path=str(dest)
        )
    except MlflowException as exc:
        raise NotFoundError(f"model {settings.model_name} version {version} not found: {exc}") from exc
    onnx_path = Path(local) / ONNX_FILE
    if not onnx_path.exists():
        raise NotFoundError(f"model {settings.model_name} version {version} has no {ONNX_FILE}")
    return ServedModel(settings.model_name, version, model_version.run_id, onnx_path)


def download_serving_model(settings: Settings, dest: Path) -> ServedModel:
    """The model holding the serving alias; ModelNotReadyError when none does yet."""
    version = alias_version(settings)
    if version is None:
        raise ModelNotReadyError(
            f"no version of {settings.model_name!r} holds alias {settings.serving_alias!r} yet; "
            "run the pipeline first (mlops pipeline run)"
        )
    return download_version(settings, version, dest)


def register_version(settings: Settings, model_uri: str, run_id: str, tags: dict[str, str]) -> str:
    """Register ``model_uri`` as a new version of the model; returns the version number."""
    import mlflow

    client(settings)
    version = mlflow.register_model(model_uri, settings.model_name, tags={**tags, "run_id": run_id})
    return str(version.version)


def tag_version(settings: Settings, version: str, tags: dict[str, str]) -> None:
    mlflow_client = client(settings)
    for key, value in tags.items():
        mlflow_client.set_model_version_tag(settings.model_name, version, key, value)


def promote(settings: Settings, version: str) -> str | None:
    """Point the serving alias at ``version`` and move the Production stage; returns the previous."""
    mlflow_client = client(settings)
    previous = alias_version(settings)
    mlflow_client.set_registered_model_alias(settings.model_name, settings.serving_alias, version)
    with warnings.catch_warnings():
        # Stages are deprecated in MLflow 3 but still what older tooling reads; keep them in step.
        warnings.simplefilter("ignore", FutureWarning)
        mlflow_client.transition_model_version_stage(
            settings.model_name, version, stage="Production", archive_existing_versions=True
        )
    return previous


def list_versions(settings: Settings) -> list[dict[str, str]]:
    """Every version with its tags and aliases, newest first."""
    from mlflow.exceptions import MlflowException

    mlflow_client = client(settings)
    try:
        # search_model_versions leaves aliases empty; the registered model knows them.
        aliases: dict[str, str] = dict(mlflow_client.get_registered_model(settings.model_name).aliases)
    except MlflowException:
        return []
    versions = mlflow_client.search_model_versions(f"name = '{settings.model_name}'")
    rows = []
    for v in sorted(versions, key=lambda mv: int(mv.version), reverse=True):
        held = ",".join(sorted(a for a, version in aliases.items() if str(version) == str(v.version)))
        rows.append({"version": str(v.version), "aliases": held, "stage": str(v.current_stage),
                     **{k: str(val) for k, val in v.tags.items()}})
    return rows
