"""Submitting and scheduling the compiled pipeline on a Kubeflow Pipelines endpoint.

`mlops pipeline submit` starts one run, `mlops pipeline schedule --cron` creates a recurring run
(weekly retraining). Both send the committed IR YAML, so the cluster runs exactly what
`make compile` produced, Kubernetes settings of the train task included.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import kfp
import kfp_server_api
import urllib3

from mlops.errors import ClusterError, InputError
from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE, PIPELINE_NAME

_CRON_FIELD = re.compile(r"^[0-9A-Za-z*?/,\-LW#]+$")
# What a KFP endpoint answers or fails with when it is down, refuses or misunderstands a request.
_ENDPOINT_ERRORS = (kfp_server_api.ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


@dataclass(frozen=True)
class Submitted:
    id: str
    experiment_id: str
    name: str


def kfp_cron(expression: str) -> str:
    """KFP's six-field cron (seconds first); a standard five-field expression gets second 0."""
    fields = expression.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6 or not all(_CRON_FIELD.match(field) for field in fields):
        raise InputError(f"invalid cron expression {expression!r}: expected 5 fields (minute hour day month "
                         "weekday) or KFP's 6 (second first)", field="cron")
    return " ".join(fields)


def _client(host: str) -> kfp.Client:
    if not re.match(r"^https?://", host):
        raise InputError(f"KFP endpoint must be an http(s) URL, got {host!r}", field="host")
    try:
        with warnings.catch_warnings():
            # Every construction warns that it needs KFP >= 2.0.0-beta.2; that is the platform's target.
            warnings.filterwarnings("ignore", message="This client only works with Kubeflow Pipeline",
                                    category=FutureWarning)
            return kfp.Client(host=host)
    except _ENDPOINT_ERRORS as exc:
        raise ClusterError(f"cannot reach Kubeflow Pipelines at {host}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, kfp_server_api.ApiException):
        return f"HTTP {exc.status} {exc.reason}".strip()
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _package(package: Path) -> str:
    if not package.is_file():
        raise InputError(f"compiled pipeline {package} does not exist; run `make compile`", field="package")
    return str(package)


def submit(host: str, source: str, *, experiment: str, run_name: str, package: Path = COMPILED_PIPELINE) -> Submitted:
    """Start one run of the compiled pipeline on ``source`` (a path or URL the cluster can read)."""
    client = _client(host)
    name = run_name or f"{PIPELINE_NAME}-run"
    try:
        result = client.create_run_from_pipeline_package(
            _package(package), arguments={"source": source, "run_name": name}, run_name=name,
            experiment_name=experiment)
        return Submitted(id=result.run_id, experiment_id=result.run_info.experiment_id or "", name=name)
    except _ENDPOINT_ERRORS as exc:
        raise ClusterError(f"Kubeflow Pipelines at {host} refused the run: {_reason(exc)}") from exc


def schedule(host: str, source: str, *, cron: str, experiment: str, name: str, last_weeks: int = 0,
             package: Path = COMPILED_PIPELINE) -> Submitted:
    """Create a recurring run: the pipeline on ``source`` at every ``cron`` time, one at a time; with
    ``last_weeks``, each run trains on the weeks before it (the pipeline resolves it at ingest)."""
    expression = kfp_cron(cron)
    client = _client(host)
    try:
        experiment_id = client.create_experiment(name=experiment).experiment_id
        recurring = client.create_recurring_run(
            experiment_id=experiment_id, job_name=name, description=f"{PIPELINE_NAME} on {source} at {expression}",
            cron_expression=expression, max_concurrency=1, no_catchup=True,
            params={"source": source, "run_name": name, **({"last_weeks": last_weeks} if last_weeks else {})},
            pipeline_package_path=_package(package))
    except _ENDPOINT_ERRORS as exc:
        raise ClusterError(f"Kubeflow Pipelines at {host} refused the recurring run: {_reason(exc)}") from exc
    return Submitted(id=recurring.recurring_run_id, experiment_id=experiment_id, name=name)
