"""Run the compiled pipeline locally with kfp.local (the embedded default).

The IR YAML that Kubeflow Pipelines would run is loaded and executed here, each step in a
subprocess of the current environment. Settings reach the steps as MLOPS_* variables; when a
step fails, the pipeline's MLflow run says which step and why, and that is what is raised.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mlops import registry
from mlops.errors import PipelineError
from mlops.settings import Settings
from pipelines.pipeline import COMPILED_PIPELINE


@dataclass(frozen=True)
class PipelineOutcome:
    run_name: str
    run_id: str
    decision: str
    version: str | None
    production_version: str | None


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as MLOPS_* variables, with paths made absolute for the step processes."""
    # Tuples travel as JSON, the form pydantic-settings parses back.
    env = {f"MLOPS_{k.upper()}": v if isinstance(v, str) else json.dumps(v)
           for k, v in settings.model_dump(mode="json", exclude_none=True).items()}
    env["MLOPS_HOME"] = str(settings.resolved_home)
    env["MLOPS_CONTRACT_PATH"] = str(settings.contract_path.expanduser().resolve())
    return env


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def run_pipeline(source: str, settings: Settings, *, package: Path = COMPILED_PIPELINE,
                 run_name: str | None = None) -> PipelineOutcome:
    """Execute ``package`` on ``source``; raises PipelineError naming the failed step."""
    from kfp import components, local

    run_name = run_name or f"fraud-training-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"
    settings.kfp_root.mkdir(parents=True, exist_ok=True)
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(settings.kfp_root),
               raise_on_error=True)
    pipeline = components.load_component_from_file(str(package))
    with _environment(settings_env(settings)):
        try:
            pipeline(source=source, run_name=run_name)
        except RuntimeError as exc:
            raise _failure(settings, run_name, exc) from exc
    return _outcome(settings, run_name)


def _find_run(settings: Settings, run_name: str) -> dict[str, str] | None:
    mlflow_client = registry.client(settings)
    experiment = mlflow_client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        return None
    runs = mlflow_client.search_runs([experiment.experiment_id],
                                     filter_string=f"attributes.run_name = '{run_name}'", max_results=1)
    if not runs:
        return None
    return {"run_id": runs[0].info.run_id, **runs[0].data.tags}


def _failure(settings: Settings, run_name: str, exc: RuntimeError) -> PipelineError:
    run = _find_run(settings, run_name)
    if run and "failed_step" in run:
        step = run["failed_step"]
        return PipelineError(f"pipeline stopped at {step}: {run.get('failure_reason', exc)}", step=step)
    return PipelineError(f"pipeline failed: {exc}")


def _outcome(settings: Settings, run_name: str) -> PipelineOutcome:
    run = _find_run(settings, run_name)
    if run is None:
        raise PipelineError(f"pipeline finished but MLflow has no run named {run_name}")
    return PipelineOutcome(run_name=run_name, run_id=run["run_id"], decision=run.get("decision", "unknown"),
                           version=run.get("registered_version"),
                           production_version=registry.alias_version(settings))
