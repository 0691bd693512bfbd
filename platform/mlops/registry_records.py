"""What the registry reports and decides on, kept as typed records with each version's MLflow run.

MLflow's registry holds aliases and stages (typed, kept) and tags (free strings anyone can edit or
delete in the UI). The tags a person reads there are still written, but what ``mlops model list``
shows and the share a canary serves come from these records instead, which live with the run a
version was registered from (``ModelVersion.run_id``, an attribute, not a tag):

- evaluate's decision on a version: the run's artifact ``registry/<model>/version-<n>.json``, one
  per version (a DVC rerun of evaluate registers another version from the same run);
- a canary's share of the traffic: the run's metric ``canary_percent/<model>`` at step ``<n>``, its
  latest value the share now, its history when each share was set.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from mlops.registry_client import connect
from mlops.settings import Settings

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Metric

CANARY_METRIC = "canary_percent"  # + "/<model>"


class VersionDecision(BaseModel):
    """Why evaluate promoted or rejected a registered version."""

    model_config = ConfigDict(extra="forbid")

    decision: str  # "promote" or "reject"
    reason: str
    candidate_f1: float
    candidate_pr_auc: float


def _decision_path(model: str, version: str) -> str:
    return f"registry/{model}/version-{version}.json"


def record_decision(client: MlflowClient, run_id: str, model: str, version: str, decision: VersionDecision) -> None:
    client.log_text(run_id, decision.model_dump_json(indent=2), _decision_path(model, version))


def read_decision(client: MlflowClient, run_id: str, model: str, version: str) -> VersionDecision | None:
    """The decision recorded for ``version``; None for a version registered without one (by hand, say).

    Raises MlflowException for anything but "not there": an outage is not "no decision".
    """
    from mlflow.exceptions import MlflowException

    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, _decision_path(model, version), tmp)
        except MlflowException as exc:
            if getattr(exc, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        return VersionDecision.model_validate_json(Path(path).read_text())


def revise_decision(settings: Settings, version: str, decision: str, reason: str) -> None:
    """A later verdict on ``version`` (the canary judge's rollback) in place of evaluate's, its figures kept;
    nothing for a version registered without a decision."""
    client = connect(settings).client
    run_id = client.get_model_version(settings.model_name, version).run_id
    current = read_decision(client, run_id, settings.model_name, version) if run_id else None
    if run_id and current is not None:
        revised = current.model_copy(update={"decision": decision, "reason": reason})
        record_decision(client, run_id, settings.model_name, version, revised)


def record_canary_share(client: MlflowClient, run_id: str, model: str, version: str, percent: float) -> None:
    client.log_metric(run_id, f"{CANARY_METRIC}/{model}", percent, step=int(version))


def read_canary_share(client: MlflowClient, run_id: str, model: str, version: str) -> float:
    """The share last set for ``version``'s canary; 0 (no traffic) when none was ever set."""
    latest = _latest_share(client, run_id, model, version)
    return 0.0 if latest is None else latest.value


def canary_started(settings: Settings, version: str) -> datetime | None:
    """When ``version``'s canary share was last set (the canary started or changed); None if never."""
    client = connect(settings).client
    run_id = client.get_model_version(settings.model_name, version).run_id
    latest = _latest_share(client, run_id, settings.model_name, version) if run_id else None
    return None if latest is None else datetime.fromtimestamp(latest.timestamp / 1000, UTC)


def _latest_share(client: MlflowClient, run_id: str, model: str, version: str) -> Metric | None:
    points = [m for m in client.get_metric_history(run_id, f"{CANARY_METRIC}/{model}") if m.step == int(version)]
    return max(points, key=lambda m: m.timestamp, default=None)
