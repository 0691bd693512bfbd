"""Run the compiled pipeline locally with kfp.local (the embedded default).

The IR YAML that Kubeflow Pipelines would run is loaded and executed here, each step in a
subprocess of the current environment. Settings reach the steps as MLOPS_* variables; when a
step fails, the pipeline's MLflow run says which step and why, and that is what is raised.
What cannot work is refused before kfp starts: a missing local source, an unknown format, an
MLflow server that does not answer. The steps' streamed logs go to one log file per run
(:mod:`pipelines.orchestration.progress`); the caller gets one report per finished step. ``runner="inline"``
calls the same steps in this process instead (:mod:`pipelines.orchestration.inline_runner`), reported and
failing the same way.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import SecretStr

from mlops import registry
from mlops.errors import PipelineError
from mlops.preflight import check_source, check_tracking_server, check_tracking_store
from mlops.settings import Settings
from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE
from pipelines.orchestration.progress import ANSI_ESCAPE, StepReport, captured_run_output, key_figure

if TYPE_CHECKING:
    from mlflow.entities import Run

log = logging.getLogger(__name__)

# kfp: the compiled IR YAML on kfp.local, a process per step (the default); inline: the same steps
# in this process (pipelines.orchestration.inline_runner).
Runner = Literal["kfp", "inline"]


@dataclass(frozen=True)
class PipelineOutcome:
    run_name: str
    run_id: str
    decision: str
    version: str | None
    production_version: str | None


def settings_env(settings: Settings) -> dict[str, str]:
    """The settings as MLOPS_* variables, with paths made absolute for the step processes."""
    # Tuples travel as JSON, the form pydantic-settings parses back; secrets as themselves, not masked.
    dumped = settings.model_dump(mode="json", exclude_none=True)
    for name in dumped:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            dumped[name] = value.get_secret_value()
    env = {f"MLOPS_{k.upper()}": v if isinstance(v, str) else json.dumps(v) for k, v in dumped.items()}
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


def new_run_name() -> str:
    return f"fraud-training-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"


def run_log_path(settings: Settings, run_name: str) -> Path:
    """Where a local run's streamed step logs and library logs go."""
    return settings.logs_dir / f"{run_name}.log"


def run_pipeline(source: str, settings: Settings, *, package: Path = COMPILED_PIPELINE,
                 run_name: str | None = None, verbose: bool = False,
                 on_step: Callable[[StepReport], None] | None = None,
                 since: str = "", until: str = "", last_weeks: int = 0, runner: Runner = "kfp") -> PipelineOutcome:
    """Execute ``package`` on ``source``; raises PipelineError naming the failed step.

    ``runner`` "inline" calls the same steps in this process instead (``package`` is then unused).

    ``since``/``until``/``last_weeks`` are the training window (:mod:`mlops.data.training_window`);
    not given, the run trains on all the data.

    Streamed logs go to :func:`run_log_path` (and to stdout too when ``verbose``); ``on_step`` gets
    each finished step with its duration and headline.
    """
    check_source(source)
    check_tracking_server(settings.resolved_tracking_uri)
    settings = _with_tracking_store(settings)
    run_name = run_name or new_run_name()
    settings.kfp_root.mkdir(parents=True, exist_ok=True)
    failed_steps: list[str] = []

    def report(step: StepReport) -> None:
        if not step.succeeded:
            failed_steps.append(step.step)
        if on_step is None:
            return
        figure = ""
        try:
            run = _find_run(settings, run_name)
            if run is not None:
                figure = key_figure(step.step, run.data.params, run.data.metrics, run.data.tags)
        except Exception:  # a missing headline is never worth failing a run for (logged with exc_info)
            log.warning("no headline for step %s", step.step, exc_info=True)
        on_step(replace(step, figure=figure))

    log_path = run_log_path(settings, run_name)
    with _environment(settings_env(settings)), captured_run_output(log_path, verbose=verbose, on_step=report), \
            warnings.catch_warnings():
        # The train task's GPU settings (pipelines/cluster.py) are for Kubeflow; locally they are moot.
        warnings.filterwarnings("ignore", message=r"Task '.*': settings .* have no effect in the current local runner",
                                category=UserWarning)
        try:
            if runner == "inline":
                from pipelines.orchestration.inline_runner import run_steps

                run_steps(source, run_name, settings.kfp_root / run_name, since=since, until=until,
                          last_weeks=last_weeks)
            else:
                _run_on_kfp_local(package, settings, source=source, run_name=run_name, since=since, until=until,
                                  last_weeks=last_weeks)
        except Exception as exc:  # kfp.local's RuntimeError, or the failed step's own error inline
            raise _failure(settings, run_name, exc, failed_steps[0] if failed_steps else None) from exc
    return _outcome(settings, run_name)


def _with_tracking_store(settings: Settings) -> Settings:
    """The settings with the tracking store named explicitly, so that no step creates one.

    An explicit local store must exist (`mlops init` creates one); the embedded home's store is
    created here on its first run. Steps then refuse a store that disappears mid-run.
    """
    if settings.tracking_uri:
        check_tracking_store(settings.tracking_uri)
        return settings
    registry.create_store(settings)
    return settings.model_copy(update={"tracking_uri": settings.resolved_tracking_uri})


def _run_on_kfp_local(package: Path, settings: Settings, **arguments: str | int) -> None:
    from kfp import components, local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(settings.kfp_root),
               raise_on_error=True)
    components.load_component_from_file(str(package))(**arguments)


def _find_run(settings: Settings, run_name: str) -> Run | None:
    """The pipeline's MLflow run by name, or None."""
    mlflow_client = registry.client(settings)
    experiment = mlflow_client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        return None
    runs = mlflow_client.search_runs([experiment.experiment_id],
                                     filter_string=f"attributes.run_name = '{run_name}'", max_results=1)
    return runs[0] if runs else None


def _failure(settings: Settings, run_name: str, exc: Exception, failed_step: str | None = None) -> PipelineError:
    where = f"pipeline stopped at {failed_step}" if failed_step else "pipeline failed"
    try:
        run = _find_run(settings, run_name)
    except Exception as lookup:  # the tracking server died mid-run: say so, never a traceback
        log.warning("cannot read run %s from MLflow after the failure", run_name, exc_info=True)
        try:
            check_tracking_server(settings.resolved_tracking_uri)
        except PipelineError as down:
            # An outage, not bad input: no step, so exit code 1 whichever step it hit.
            return PipelineError(f"{where}: {down.message}; nothing was promoted")
        return PipelineError(f"{where}: MLflow could not say why: {type(lookup).__name__}: {lookup}")
    tags = run.data.tags if run is not None else {}
    if "failed_step" in tags:
        step = tags["failed_step"]
        return PipelineError(f"pipeline stopped at {step}: {tags.get('failure_reason', exc)}", step=step)
    return PipelineError(f"{where}: {ANSI_ESCAPE.sub('', str(exc))}")


def _outcome(settings: Settings, run_name: str) -> PipelineOutcome:
    run = _find_run(settings, run_name)
    if run is None:
        raise PipelineError(f"pipeline finished but MLflow has no run named {run_name}")
    tags = run.data.tags
    return PipelineOutcome(run_name=run_name, run_id=run.info.run_id, decision=tags.get("decision", "unknown"),
                           version=tags.get("registered_version"),
                           production_version=registry.alias_version(settings))
