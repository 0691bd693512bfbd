"""The registry's audit trail: one MLflow run per alias move, in the experiment ``<model> alias moves``,
and one per canary verdict the judge reached (promote, roll back, and wait, which moves nothing), in
``<model> canary verdicts``, its checks' figures as the run's metrics.

Who moved which alias from which version to which, when and why. A rollback decides from it (the
version an alias held before its last move), so it is kept as records, not as tags anyone can edit
in the UI: each move is a run whose params are the move. Runs are append-only, so two moves never
overwrite each other, and the MLflow UI lists the moves as the experiment's runs. The registered
model's description (a table) and a tag per move repeat them for people.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from mlops.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mlflow import MlflowClient
    from mlflow.entities import Run

_AUDIT_PREFIX = "audit."
_MAX_PARAM_CHARS = 6000  # MLflow's limit on a param's value


class AliasChange(BaseModel):
    """Audit record of one alias move."""

    model_config = ConfigDict(extra="forbid")

    alias: str
    from_version: str | None
    to_version: str | None  # None: the alias was removed
    actor: str
    reason: str
    at: datetime

    @property
    def tag_key(self) -> str:
        """The registered model's tag that repeats the move for the UI."""
        return f"{_AUDIT_PREFIX}{self.at.astimezone(UTC):%Y%m%dT%H%M%S%fZ}.{self.alias}"


class VerdictRecord(BaseModel):
    """Audit record of one canary verdict: what the judge said, on which figures, and what was done."""

    model_config = ConfigDict(extra="forbid")

    version: str  # the canary's
    verdict: str  # promote, roll back or wait
    reason: str
    action: str
    actor: str
    at: datetime
    figures: dict[str, float]  # "<check>: <figure>" -> value, and each arm's rows


def audit_experiment_name(settings: Settings) -> str:
    return f"{settings.model_name} alias moves"


def verdicts_experiment_name(settings: Settings) -> str:
    return f"{settings.model_name} canary verdicts"


def _experiment_id(client: MlflowClient, settings: Settings, name: str | None = None) -> str:
    from mlflow.exceptions import MlflowException

    name = name or audit_experiment_name(settings)
    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return str(existing.experiment_id)
    # A local store keeps artifacts under home (none are logged; MLflow wants a location all the same).
    local = settings.resolved_tracking_uri.startswith(("sqlite:", "file:"))
    try:
        return str(client.create_experiment(name, artifact_location=settings.artifact_root.as_uri() if local else None))
    except MlflowException:  # created meanwhile by another process
        made = client.get_experiment_by_name(name)
        if made is None:
            raise
        return str(made.experiment_id)


def record_move(client: MlflowClient, settings: Settings, change: AliasChange) -> None:
    from mlflow.entities import Param

    name = f"{change.alias}: {change.from_version or 'none'} -> {change.to_version or 'none'}"
    run = client.create_run(_experiment_id(client, settings), start_time=int(change.at.timestamp() * 1000),
                            run_name=name)
    values = {"alias": change.alias, "from_version": change.from_version or "", "to_version": change.to_version or "",
              "actor": change.actor, "reason": change.reason[:_MAX_PARAM_CHARS], "at": change.at.isoformat()}
    client.log_batch(run.info.run_id, params=[Param(key, value) for key, value in values.items()])
    client.set_terminated(run.info.run_id)


def _runs(client: MlflowClient, experiment_name: str) -> Iterator[Run]:
    """Every run of the experiment (none when it does not exist yet), page by page."""
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        return
    token = None
    while True:
        page = client.search_runs([experiment.experiment_id], max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def read_moves(client: MlflowClient, settings: Settings) -> list[AliasChange]:
    """Every recorded move of the model's aliases, oldest first."""
    moves = [AliasChange(alias=p["alias"], from_version=p["from_version"] or None, to_version=p["to_version"] or None,
                         actor=p["actor"], reason=p["reason"], at=datetime.fromisoformat(p["at"]))
             for p in (run.data.params for run in _runs(client, audit_experiment_name(settings)))]
    return sorted(moves, key=lambda move: move.at)


def record_verdict(client: MlflowClient, settings: Settings, record: VerdictRecord) -> None:
    from mlflow.entities import Metric, Param

    run = client.create_run(_experiment_id(client, settings, verdicts_experiment_name(settings)),
                            start_time=int(record.at.timestamp() * 1000),
                            run_name=f"canary {record.version}: {record.verdict}")
    values = {"version": record.version, "verdict": record.verdict, "reason": record.reason[:_MAX_PARAM_CHARS],
              "action": record.action, "actor": record.actor, "at": record.at.isoformat()}
    stamp = int(record.at.timestamp() * 1000)
    client.log_batch(run.info.run_id, params=[Param(key, value) for key, value in values.items()],
                     metrics=[Metric(key, value, stamp, 0) for key, value in record.figures.items()])
    client.set_terminated(run.info.run_id)


def read_verdicts(client: MlflowClient, settings: Settings) -> list[VerdictRecord]:
    """Every recorded canary verdict of the model, oldest first."""
    verdicts = [VerdictRecord(version=p["version"], verdict=p["verdict"], reason=p["reason"], action=p["action"],
                              actor=p["actor"], at=datetime.fromisoformat(p["at"]), figures=dict(run.data.metrics))
                for run in _runs(client, verdicts_experiment_name(settings)) for p in (run.data.params,)]
    return sorted(verdicts, key=lambda verdict: verdict.at)
