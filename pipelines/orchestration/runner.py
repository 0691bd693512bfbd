"""Run the compiled pipeline locally with kfp.local (the embedded default).

The IR YAML that Kubeflow Pipelines would run is loaded and executed here, each step in a
subprocess of the current environment. Settings reach the steps as MLOPS_* variables; when a
step fails, the pipeline's MLflow run says which step and why, and that is what is raised.
What cannot work is refused once, here, before kfp starts: a missing local source, an unknown
format, an MLflow server that does not answer. The steps' streamed logs go to one log file per run
(:mod:`pipelines.orchestration.progress`); the caller gets one report per finished step. ``runner="inline"``
calls the same steps in this process instead (:mod:`pipelines.orchestration.inline_runner`), reported and
failing the same way.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from mlops import registry
from mlops.errors import PipelineError
from mlops.preflight import check_source, check_tracking_server, check_tracking_store
from mlops.settings import Settings
from pipelines.orchestration.declaration import STEPS, Step
from pipelines.orchestration.environment import environment, settings_env
from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE
from pipelines.orchestration.progress import ANSI_ESCAPE, StepReport, captured_run_output, key_figure
from pipelines.settings import PipelineSettings

if TYPE_CHECKING:
    from mlflow.entities import Run

log = logging.getLogger(__name__)

# kfp: the compiled IR YAML on kfp.local, a process per step (the default); inline: the same steps
# in this process (pipelines.orchestration.inline_runner).
Runner = Literal["kfp", "inline"]


@dataclass(frozen=True)
class PipelineOutcome:
    run_name: str  # the name the runner gave the run; MLflow shows it renamed after the outcome
    run_id: str
    decision: str
    version: str | None
    production_version: str | None


def new_run_name(settings: Settings) -> str:
    return f"{settings.pipeline_name}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}"


def run_log_path(settings: Settings, run_name: str) -> Path:
    """Where a local run's streamed step logs and library logs go."""
    return settings.logs_dir / f"{run_name}.log"


def run_pipeline(source: str, settings: PipelineSettings, *, package: Path = COMPILED_PIPELINE,
                 run_name: str | None = None, verbose: bool = False,
                 on_step: Callable[[StepReport], None] | None = None,
                 on_start: Callable[[], None] | None = None,
                 since: str = "", until: str = "", last_weeks: int = 0, runner: Runner = "kfp",
                 steps: tuple[Step, ...] = STEPS) -> PipelineOutcome:
    """Execute ``package`` on ``source``; raises PipelineError naming the failed step.

    ``runner`` "inline" calls ``steps`` in this process instead (``package`` is then unused).

    ``since``/``until``/``last_weeks`` are the training window (:mod:`mlops.data.training_window`);
    not given, the run trains on all the data.

    Streamed logs go to :func:`run_log_path` (and to stdout too when ``verbose``); ``on_start`` is
    called once the run has passed its preflight (the one of the run: callers do not repeat it), and
    ``on_step`` gets each finished step with its duration and headline.
    """
    check_source(source)
    check_tracking_server(settings.resolved_tracking_uri)
    if settings.tracking_uri:  # an explicit local store must exist (`mlops init` creates one)
        check_tracking_store(settings.tracking_uri)
    if on_start is not None:
        on_start()
    settings = _with_tracking_store(settings)
    run_name = run_name or new_run_name(settings)
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
    parameters: dict[str, str | int] = {"source": source, "run_name": run_name, "since": since, "until": until,
                                        "last_weeks": last_weeks}
    with captured_run_output(log_path, verbose=verbose, on_step=report):
        try:
            if runner == "inline":
                from pipelines.orchestration.context import StepContext
                from pipelines.orchestration.inline_runner import run_steps

                run_steps(StepContext.of(settings), parameters, settings.kfp_root / run_name, steps)
            else:
                _run_on_kfp_local(package, settings, parameters)
        except Exception as exc:  # kfp.local's RuntimeError, or the failed step's own error inline
            raise _failure(settings, run_name, exc, failed_steps[0] if failed_steps else None) from exc
    return _outcome(settings, run_name)


def _with_tracking_store(settings: PipelineSettings) -> PipelineSettings:
    """The settings with the tracking store named explicitly, so that no step creates one.

    The embedded home's store is created here on its first run. Steps then refuse a store that
    disappears mid-run.
    """
    if settings.tracking_uri:
        return settings
    registry.create_store(settings)
    return settings.model_copy(update={"tracking_uri": settings.resolved_tracking_uri})


def _run_on_kfp_local(package: Path, settings: Settings, parameters: dict[str, str | int]) -> None:
    """The compiled pipeline on kfp.local, a process per step, the settings in their environment."""
    from kfp import components, local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(settings.kfp_root),
               raise_on_error=True)
    with environment(settings_env(settings)), warnings.catch_warnings():
        # The train task's GPU settings (pipelines/cluster.py) are for Kubeflow; locally they are moot.
        warnings.filterwarnings("ignore", message=r"Task '.*': settings .* have no effect in the current local runner",
                                category=UserWarning)
        components.load_component_from_file(str(package))(**parameters)


def _find_run(settings: Settings, run_name: str) -> Run | None:
    """The pipeline's MLflow run by the name the runner gave it (kept in a tag: evaluate renames the
    run after its outcome), or None."""
    from pipelines.orchestration.tasks import PIPELINE_RUN_TAG

    mlflow_client = registry.client(settings)
    experiment = mlflow_client.get_experiment_by_name(settings.experiment)
    if experiment is None:
        return None
    runs = mlflow_client.search_runs([experiment.experiment_id],
                                     filter_string=f"tags.{PIPELINE_RUN_TAG} = '{run_name}'", max_results=1)
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
