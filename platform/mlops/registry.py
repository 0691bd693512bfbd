"""MLflow tracking and registry helpers: one place that knows the store, experiment and aliases.

Serving follows ``models:/<name>@<alias>``; the Production stage is moved alongside while MLflow
still has stages, archiving the previous holder. A candidate can first go to alias ``staging``
(Staging stage) and take a share of the traffic as alias ``canary`` (the share is a record with the
version's run, :mod:`mlops.registry_records`, repeated as a tag for the UI); promoting the canary
to production ends it, and so does a rollback. What a version's listing shows (evaluate's
decision) is such a record too: tags are written for people, never read to decide.
Registry access fails closed: only "this model does not exist" means none; any other failure is
a RegistryError. Alias moves are compare-and-set and leave an audit record (who, when, from which
version, why): a run of its own (:mod:`mlops.registry_audit`), repeated as a tag for the UI.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mlops.errors import (
    ConfigError,
    InputError,
    ModelNotReadyError,
    NotFoundError,
    PromotionConflictError,
    RegistryError,
)
from mlops.preflight import local_store_path
from mlops.registry_audit import AliasChange, read_moves, record_move
from mlops.registry_client import activate, connect
from mlops.registry_records import (
    VersionDecision,
    read_canary_share,
    read_decision,
    record_canary_share,
    record_decision,
)
from mlops.settings import Settings

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities.model_registry import RegisteredModel

ONNX_FILE = "model.onnx"
STAGING_ALIAS = "staging"
CANARY_ALIAS = "canary"
CANARY_PERCENT_TAG = "canary_percent"
UNCHECKED = object()  # promote(expected=...) default: move the alias whatever it holds


@dataclass(frozen=True)
class ServedModel:
    name: str
    version: str
    run_id: str | None
    onnx_path: Path


def client(settings: Settings) -> MlflowClient:
    """The process's client of the settings' stores (:func:`mlops.registry_client.connect`); sets no global state."""
    return connect(settings).client


def create_store(settings: Settings) -> Path | None:
    """Create the local tracking store the settings name (its folder too), on purpose; the path.

    None for a tracking server, which keeps its own store. Safe to repeat on an existing store. The
    store of a copied home is pointed at the copy's own artifacts.
    """
    from mlflow import MlflowClient

    from mlops.store_location import relocate_store

    path = local_store_path(settings.resolved_tracking_uri)
    if path is None:
        return None
    relocate_store(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    MlflowClient(settings.resolved_tracking_uri).search_experiments(max_results=1)  # creates and migrates
    return path


# MLflow 3's UI opens an experiment of this kind in its model-training layout (runs with their
# metric columns) rather than the GenAI one (traces, prompts).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"


# A view of the runs list saved on the experiment, as the UI's "Share" button saves one: the outcome and
# the test metrics as columns, newest run first. runs_list_link opens it.
RUNS_VIEW_KEY = "model-training"
RUNS_VIEW_TAG = f"mlflow.sharedViewState.{RUNS_VIEW_KEY}"
RUNS_VIEW = json.dumps({
    "selectedColumns": ["tags.`decision`", "metrics.`test_f1`", "metrics.`test_pr_auc`",
                        "metrics.`production_test_f1`", "tags.`registered_version`"],
    "orderByKey": "attributes.start_time", "orderByAsc": False,
})


def ensure_experiment(settings: Settings) -> str:
    """The experiment id, creating the experiment (artifacts under home) on first use; an experiment
    made before the runs view existed gets it."""
    mlflow_client = client(settings)
    existing = mlflow_client.get_experiment_by_name(settings.experiment)
    if existing is not None:
        if existing.tags.get(RUNS_VIEW_TAG) != RUNS_VIEW:
            mlflow_client.set_experiment_tag(existing.experiment_id, RUNS_VIEW_TAG, RUNS_VIEW)
        return str(existing.experiment_id)
    # A local store keeps artifacts under home; a tracking server decides its own location.
    local = settings.resolved_tracking_uri.startswith(("sqlite:", "file:"))
    location = settings.artifact_root.as_uri() if local else None
    return str(mlflow_client.create_experiment(settings.experiment, artifact_location=location,
                                               tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, RUNS_VIEW_TAG: RUNS_VIEW}))


def runs_list_link(experiment_id: str) -> str:
    """The UI route (after the server's address) of the experiment's runs list in the saved view."""
    return f"#/experiments/{experiment_id}/runs?viewStateShareKey={RUNS_VIEW_KEY}&compareRunsMode=TABLE"


def _missing(exc: Exception) -> bool:
    """Only "this does not exist" means none; an outage or a permission error is not an answer."""
    return getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST"


def _registered_model(settings: Settings) -> RegisteredModel | None:
    from mlflow.exceptions import MlflowException

    try:
        return client(settings).get_registered_model(settings.model_name)
    except MlflowException as exc:
        if _missing(exc):
            return None
        raise RegistryError(f"model registry failed reading {settings.model_name!r}: {exc.message}") from exc
    except (RegistryError, ConfigError):  # an outage, or a copied home (one line each, as they are)
        raise
    except Exception as exc:  # a store can fail in any way (connection, SQL); none of them is "no model"
        raise RegistryError(f"model registry unreachable: {type(exc).__name__}: {exc}") from exc


def aliases(settings: Settings) -> dict[str, str]:
    """Alias -> version of the model (empty when the model is not registered); RegistryError on failure."""
    model = _registered_model(settings)
    return {} if model is None else {alias: str(v) for alias, v in model.aliases.items()}


def alias_version(settings: Settings, alias: str | None = None) -> str | None:
    """The version holding ``alias`` (default: the serving alias), or None when none does.

    Raises RegistryError when the registry cannot answer: an outage is never "no production model".
    """
    return aliases(settings).get(alias or settings.serving_alias)


def download_version(settings: Settings, version: str, dest: Path) -> ServedModel:
    """Download one registered version's ONNX file; raises NotFoundError when it is not there."""
    from mlflow.exceptions import MlflowException

    stores = connect(settings)
    model_version = None
    try:
        model_version = stores.client.get_model_version(settings.model_name, version)
        local = stores.download_version(settings.model_name, version, dest)
    except MlflowException as exc:
        if _missing(exc) and model_version is not None:  # the version is registered, its files are gone
            raise NotFoundError(f"model {settings.model_name} version {version} has no {ONNX_FILE}") from exc
        if _missing(exc):
            raise NotFoundError(f"model {settings.model_name} version {version} not found: {exc.message}") from exc
        raise RegistryError(f"model registry failed reading version {version}: {exc.message}") from exc
    onnx_path = local / ONNX_FILE
    if not onnx_path.exists():
        raise NotFoundError(f"model {settings.model_name} version {version} has no {ONNX_FILE}")
    return ServedModel(settings.model_name, version, model_version.run_id, onnx_path)


def download_serving_model(settings: Settings, dest: Path, alias: str | None = None) -> ServedModel:
    """The model holding ``alias`` (default: the serving alias); ModelNotReadyError when none does yet."""
    alias = alias or settings.serving_alias
    version = alias_version(settings, alias)
    if version is None:
        raise ModelNotReadyError(
            f"no version of {settings.model_name!r} holds alias {alias!r} yet; "
            "run the pipeline first (mlops pipeline run)"
        )
    return download_version(settings, version, dest)


def register_version(settings: Settings, model_uri: str, run_id: str, tags: dict[str, str],
                     decision: VersionDecision | None = None) -> str:
    """Register ``model_uri`` as a new version of the model, ``decision`` recorded with it (what
    list_versions shows; ``tags`` are for the UI); returns the version number."""
    import mlflow

    activate(settings)  # register_model is fluent: it reads the global registry URI
    version = str(mlflow.register_model(model_uri, settings.model_name, tags={**tags, "run_id": run_id}).version)
    if decision is not None:
        record_decision(client(settings), run_id, settings.model_name, version, decision)
    return version


def tag_version(settings: Settings, version: str, tags: dict[str, str]) -> None:
    mlflow_client = client(settings)
    for key, value in tags.items():
        mlflow_client.set_model_version_tag(settings.model_name, version, key, value)


def promote(settings: Settings, version: str, *, expected: str | object | None = UNCHECKED,
            alias: str | None = None, actor: str = "unknown", reason: str = "") -> str | None:
    """Point ``alias`` (default: serving) at ``version``, compare-and-set; returns the version it replaced.

    ``expected`` is the version the caller saw holding the alias (None: no version did); when the
    alias holds another one now, nothing moves and PromotionConflictError is raised. MLflow has no
    conditional update, so the check runs right before the move. Every move leaves an audit record.
    """
    from mlflow.exceptions import MlflowException

    alias = alias or settings.serving_alias
    current = alias_version(settings, alias)
    if expected is not UNCHECKED and current != expected:
        raise PromotionConflictError(
            f"alias {alias!r} moved since it was read: expected {expected or 'none'}, now {current or 'none'}; "
            "nothing changed")
    mlflow_client = client(settings)
    try:
        mlflow_client.get_model_version(settings.model_name, version)
        mlflow_client.set_registered_model_alias(settings.model_name, alias, version)
        if alias == settings.serving_alias:
            # The previous Production holder is Archived; a canary of this version has done its job.
            _set_stage(mlflow_client, settings, version, "Production", archive_existing=True)
            if aliases(settings).get(CANARY_ALIAS) == version:
                _remove_canary(mlflow_client, settings, version, actor, f"promoted to {alias}: {reason}")
        elif alias == STAGING_ALIAS:
            _set_stage(mlflow_client, settings, version, "Staging")
        _audit(mlflow_client, settings, AliasChange(alias=alias, from_version=current, to_version=version,
                                                    actor=actor, reason=reason, at=datetime.now(UTC)))
    except MlflowException as exc:
        if _missing(exc):
            raise NotFoundError(f"model {settings.model_name} version {version} not found") from exc
        raise RegistryError(f"model registry failed moving alias {alias!r}: {exc.message}") from exc
    return current


def _set_stage(mlflow_client: MlflowClient, settings: Settings, version: str, stage: str, *,
               archive_existing: bool = False) -> None:
    with warnings.catch_warnings():
        # Stages are deprecated in MLflow 3 but still what older tooling reads; keep them in step.
        warnings.simplefilter("ignore", FutureWarning)
        mlflow_client.transition_model_version_stage(settings.model_name, version, stage=stage,
                                                     archive_existing_versions=archive_existing)


def _audit(mlflow_client: MlflowClient, settings: Settings, change: AliasChange) -> None:
    record_move(mlflow_client, settings, change)
    mlflow_client.set_registered_model_tag(settings.model_name, change.tag_key, change.model_dump_json())  # the UI's
    _describe_history(settings)


def _remove_canary(mlflow_client: MlflowClient, settings: Settings, version: str, actor: str, reason: str) -> None:
    mlflow_client.delete_registered_model_alias(settings.model_name, CANARY_ALIAS)
    mlflow_client.delete_registered_model_tag(settings.model_name, CANARY_PERCENT_TAG)
    _audit(mlflow_client, settings, AliasChange(alias=CANARY_ALIAS, from_version=version, to_version=None,
                                                actor=actor, reason=reason, at=datetime.now(UTC)))


def canary(settings: Settings) -> tuple[str, float] | None:
    """The canary's version and its percent of the traffic, or None when no canary runs."""
    from mlflow.exceptions import MlflowException

    model = _registered_model(settings)
    if model is None or CANARY_ALIAS not in model.aliases:
        return None
    version = str(model.aliases[CANARY_ALIAS])
    mlflow_client = client(settings)
    try:
        run_id = mlflow_client.get_model_version(settings.model_name, version).run_id
        percent = read_canary_share(mlflow_client, run_id, settings.model_name, version) if run_id else 0.0
    except MlflowException as exc:
        raise RegistryError(f"model registry failed reading the canary's share: {exc.message}") from exc
    return version, percent


def start_canary(settings: Settings, version: str, percent: float, *, actor: str, reason: str) -> str | None:
    """Serve ``percent`` % of the traffic from ``version`` (alias canary, Staging stage); the canary it replaced."""
    if not 0 < percent < 100:
        raise InputError(f"--canary must be a percent between 0 and 100 (exclusive), got {percent:g}",
                         field="canary")
    if alias_version(settings) == version:
        raise PromotionConflictError(f"version {version} already holds {settings.serving_alias!r}")
    from mlflow.exceptions import MlflowException

    mlflow_client = client(settings)
    try:
        run_id = mlflow_client.get_model_version(settings.model_name, version).run_id
        if not run_id:
            raise InputError(f"version {version} has no run to record its canary share with", field="version")
        # The share first: a service that sees the new alias sees its share with it.
        record_canary_share(mlflow_client, run_id, settings.model_name, version, percent)
        mlflow_client.set_registered_model_tag(settings.model_name, CANARY_PERCENT_TAG, f"{percent:g}")
        _set_stage(mlflow_client, settings, version, "Staging")
    except MlflowException as exc:
        if _missing(exc):
            raise NotFoundError(f"model {settings.model_name} version {version} not found") from exc
        raise RegistryError(f"model registry failed starting the canary: {exc.message}") from exc
    return promote(settings, version, alias=CANARY_ALIAS, actor=actor, reason=reason or f"canary at {percent:g} %")


def history(settings: Settings, alias: str | None = None) -> list[AliasChange]:
    """Every recorded alias move (of ``alias`` only, when given), oldest first."""
    from mlflow.exceptions import MlflowException

    try:
        changes = read_moves(client(settings), settings)
    except MlflowException as exc:
        raise RegistryError(f"model registry failed reading the alias moves: {exc.message}") from exc
    return [c for c in changes if alias is None or c.alias == alias]


def _describe_history(settings: Settings) -> None:
    """The registered model's description (the first thing its page in the MLflow UI shows) as the
    audit history in a Markdown table, newest move first (mlops.registry_audit keeps the record)."""
    lines = [f"### Alias moves of {settings.model_name}", "",
             "| when (UTC) | alias | from | to | who | why |", "|---|---|---|---|---|---|"]
    for c in reversed(history(settings)):
        why = c.reason.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {c.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} | {c.alias} | {c.from_version or 'none'} | "
                     f"{c.to_version or 'removed'} | {c.actor} | {why} |")
    client(settings).update_registered_model(settings.model_name, description="\n".join(lines))


def describe_version(settings: Settings, version: str, description: str) -> None:
    """Set a version's description (Markdown, shown on its page in the MLflow UI)."""
    client(settings).update_model_version(settings.model_name, version, description=description)


def rollback(settings: Settings, *, actor: str, reason: str, alias: str | None = None) -> AliasChange:
    """End a running canary (all traffic back to production) when rolling back the serving alias;
    else move ``alias`` (default: serving) back to the version it held before its last move. The new audit record."""
    alias = alias or settings.serving_alias
    running = canary(settings) if alias == settings.serving_alias else None
    if running is not None:
        from mlflow.exceptions import MlflowException

        try:
            _remove_canary(client(settings), settings, running[0], actor, reason or "rollback")
        except MlflowException as exc:
            raise RegistryError(f"model registry failed ending the canary: {exc.message}") from exc
        return history(settings, CANARY_ALIAS)[-1]
    moves = history(settings, alias)
    last = moves[-1] if moves else None
    if last is None or last.from_version is None or last.to_version is None:
        raise PromotionConflictError(f"alias {alias!r} has no earlier version to roll back to")
    promote(settings, last.from_version, expected=last.to_version, alias=alias, actor=actor,
            reason=reason or "rollback")
    return history(settings, alias)[-1]


def list_versions(settings: Settings) -> list[dict[str, str]]:
    """Every version with its aliases, stage, run and recorded decision (decision, reason,
    candidate_f1, candidate_pr_auc; absent for a version registered without one), newest first."""
    # search_model_versions leaves aliases empty; the registered model knows them.
    held_by = aliases(settings)
    if not held_by and _registered_model(settings) is None:
        return []
    from mlflow.exceptions import MlflowException

    mlflow_client = client(settings)
    rows = []
    try:
        versions = mlflow_client.search_model_versions(f"name = '{settings.model_name}'")
        for v in sorted(versions, key=lambda mv: int(mv.version), reverse=True):
            held = ",".join(sorted(a for a, version in held_by.items() if version == str(v.version)))
            decision = read_decision(mlflow_client, v.run_id, settings.model_name, str(v.version)) if v.run_id else None
            recorded = {} if decision is None else {
                "decision": decision.decision, "decision_reason": decision.reason,
                "candidate_f1": f"{decision.candidate_f1:.4f}", "candidate_pr_auc": f"{decision.candidate_pr_auc:.4f}"}
            rows.append({"version": str(v.version), "aliases": held, "stage": str(v.current_stage),
                         "run_id": str(v.run_id or ""), **recorded})
    except MlflowException as exc:
        raise RegistryError(f"model registry failed listing the versions: {exc.message}") from exc
    return rows
