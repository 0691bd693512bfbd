"""Run the compiled pipeline locally with kfp.local (the embedded default).

The IR YAML that Kubeflow Pipelines would run is loaded and executed here, each step in a
subprocess of the current environment. Settings reach the steps as one serialized settings record
(:func:`pipelines.orchestration.environment.record_env`). Each run has
its own folder under settings.kfp_root, where the steps leave their records
(:mod:`pipelines.orchestration.run_records`): the outcome is evaluate's record, and when a step
fails its failure record says which step and why, and that is what is raised.
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
from typing import Literal

from mlops import registry
from mlops.errors import PipelineError
from mlops.preflight import check_source, check_tracking_server, check_tracking_store, local_store_path
from mlops.settings import Settings
from pipelines.orchestration.declaration import STEPS, Step
from pipelines.orchestration.environment import environment, record_env
from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE
from pipelines.orchestration.progress import ANSI_ESCAPE, StepReport, captured_run_output, key_figure
from pipelines.orchestration.records import DeployRecord, EvaluateRecord, IngestRecord
from pipelines.orchestration.run_records import RunRecords
from pipelines.settings import PipelineSettings

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
    rollout: str = ""  # deploy's own line (a canary and its next step, or what now serves); empty when not run


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
            figure = _headline(settings, run_name, step.step, steps)
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

                run_steps(StepContext.of(settings), parameters, RunRecords.of(settings, run_name).folder, steps)
            else:
                _run_on_kfp_local(package, settings, parameters, RunRecords.of(settings, run_name).folder)
        except Exception as exc:  # kfp.local's RuntimeError, or the failed step's own error inline
            raise _failure(settings, run_name, exc, failed_steps[0] if failed_steps else None) from exc
    return read_outcome(settings, run_name)


def _with_tracking_store(settings: PipelineSettings) -> PipelineSettings:
    """The settings with the tracking store named explicitly, so that no step creates one.

    The embedded home's store is created here on its first run. Steps then refuse a store that
    disappears mid-run.
    """
    if settings.tracking_uri:
        return settings
    registry.create_store(settings)
    return settings.model_copy(update={"tracking_uri": settings.resolved_tracking_uri})


def _run_on_kfp_local(package: Path, settings: Settings, parameters: dict[str, str | int], root: Path) -> None:
    """The compiled pipeline on kfp.local, a process per step, the settings record in their environment, the
    outputs under ``root`` (the run's own folder, where the runner finds the records)."""
    from kfp import components, local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root),
               raise_on_error=True)
    with environment(record_env(settings)), warnings.catch_warnings():
        # The train task's GPU settings (pipelines/cluster.py) are for Kubeflow; locally they are moot.
        warnings.filterwarnings("ignore", message=r"Task '.*': settings .* have no effect in the current local runner",
                                category=UserWarning)
        components.load_component_from_file(str(package))(**parameters)


def _headline(settings: Settings, run_name: str, step_name: str, steps: tuple[Step, ...]) -> str:
    """A finished step's headline: its record, and what it logged to the run ingest's record names."""
    records = RunRecords.of(settings, run_name)
    ingested = records.record("ingest", IngestRecord)
    if ingested is None:
        return ""
    kind = next((s.record for s in steps if s.name == step_name), None)
    record = records.record(step_name, kind) if kind is not None else None
    run = registry.client(settings).get_run(ingested.run_id)
    return key_figure(step_name, run.data.params, run.data.metrics, record)


def _failure(settings: Settings, run_name: str, exc: Exception, failed_step: str | None = None) -> PipelineError:
    where = f"pipeline stopped at {failed_step}" if failed_step else "pipeline failed"
    try:
        # A diagnosis, not a second preflight: only a server can have gone down mid-run.
        if local_store_path(settings.resolved_tracking_uri) is None:
            check_tracking_server(settings.resolved_tracking_uri)
    except PipelineError as down:
        # An outage, not bad input: no step, so exit code 1 whichever step it hit.
        return PipelineError(f"{where}: {down.message}; nothing was promoted")
    failure = RunRecords.of(settings, run_name).failure()
    if failure is not None:
        return PipelineError(f"pipeline stopped at {failure.step}: {failure.reason}", step=failure.step,
                             bad_input=failure.bad_input)
    return PipelineError(f"{where}: {ANSI_ESCAPE.sub('', str(exc))}")


def read_outcome(settings: Settings, run_name: str) -> PipelineOutcome:
    """The outcome of the finished local run ``run_name``: evaluate's record and the serving alias."""
    records = RunRecords.of(settings, run_name)
    evaluated = records.record("evaluate", EvaluateRecord)
    if evaluated is None:
        raise PipelineError(f"pipeline finished but left no evaluate record under {records.folder}")
    deployed = records.record("deploy", DeployRecord)
    return PipelineOutcome(run_name=run_name, run_id=evaluated.run_id, decision=evaluated.decision,
                           version=evaluated.version, production_version=registry.alias_version(settings),
                           rollout=deployed.line if deployed is not None and deployed.promoted else "")
