"""``mlops pipeline ...`` and ``mlops demo``: compile the training pipeline, run it here (kfp.local or
inline), submit or schedule it on Kubeflow Pipelines, and the demo that runs it end to end."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlops.errors import MLOpsError
from mlops_cli.output import console
from mlops_cli.output import error_exit as _error_exit
from mlops_cli.output import fail as _fail
from mlops_cli.output import load_settings as _settings

if TYPE_CHECKING:
    from mlops.settings import Settings
    from pipelines.settings import PipelineSettings

# `mlops pipeline run --runner` (pipelines.orchestration.runner.Runner), checked before pipelines/ and kfp are imported.
PIPELINE_RUNNERS = ("kfp", "inline")
pipeline_app = typer.Typer(help="Compile and run the training pipeline.", no_args_is_help=True)


@pipeline_app.command("compile")
def compile_command(
    check: Annotated[bool, typer.Option(help="Only check that the committed YAML is current.")] = False,
) -> None:
    """Compile the pipeline to IR YAML (pipelines/training_pipeline.yaml)."""
    import tempfile

    from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE, compile_pipeline

    if not check:
        console.print(f"compiled to {compile_pipeline()}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        fresh = compile_pipeline(Path(tmp) / "pipeline.yaml").read_text()
    if not COMPILED_PIPELINE.exists() or fresh != COMPILED_PIPELINE.read_text():
        _error_exit(f"{COMPILED_PIPELINE} is stale; run `mlops pipeline compile`", 1)
    console.print(f"{COMPILED_PIPELINE} is current")


@pipeline_app.command("run")
def run_command(
    source: Annotated[str, typer.Argument(help="CSV/Parquet path or URL of raw transactions.")],
    run_name: Annotated[str, typer.Option(help="MLflow run name (default: timestamped).")] = "",
    verbose: Annotated[bool, typer.Option(help="Stream every step's logs here instead of only to the log file.")]
    = False,
    since: Annotated[str, typer.Option(help="Train on rows at or after this time (ISO 8601; default: all).")] = "",
    until: Annotated[str, typer.Option(help="Train on rows before this time (ISO 8601; default: all).")] = "",
    last_weeks: Annotated[int, typer.Option(min=0, help="Train on the last N weeks before --until or now "
                                                      "(0: all data).")] = 0,
    runner: Annotated[str, typer.Option(metavar="[kfp|inline]",
                                        help="kfp: the compiled pipeline on kfp.local, a process per step; "
                                             "inline: the same steps in this process (debugging).")] = "kfp",
) -> None:
    """Run the compiled pipeline locally with kfp.local: one line per step, the steps' logs in a file.

    One run at a time per MLOPS_HOME: a run started while another holds the lock exits 75 at once.
    """
    import time

    from mlops.contract import load_contract
    from mlops.data.source_columns import check_source_columns
    from mlops.data.training_window import resolve_window
    from mlops.preflight import check_source

    if runner not in PIPELINE_RUNNERS:
        _error_exit(f"--runner must be one of {', '.join(PIPELINE_RUNNERS)}, got {runner!r}", 2)
    resolve_window(since, until, last_weeks)  # refused before settings, kfp, pandas and MLflow are even imported
    check_source(source)
    from mlops.run_lock import exclusive_pipeline_run
    from pipelines.settings import PipelineSettings

    settings = _settings(PipelineSettings)
    check_source_columns(source, load_contract(settings.contract_path))
    with exclusive_pipeline_run(settings):  # run_pipeline preflights the tracking store, once
        _run_locked(source, settings, run_name, verbose, (since, until, last_weeks), time.monotonic(), runner)


def _run_locked(source: str, settings: PipelineSettings, run_name: str, verbose: bool, window: tuple[str, str, int],
                started: float, runner: str = "kfp") -> None:
    """The pipeline run of ``mlops pipeline run``, under the run lock."""
    import time

    from pipelines.orchestration.runner import new_run_name, run_log_path, run_pipeline

    name = run_name or new_run_name(settings)
    logs = run_log_path(settings, name)
    since, until, last_weeks = window
    try:
        outcome = run_pipeline(source, settings, run_name=name, verbose=verbose,
                               on_start=lambda: console.print(f"pipeline run {name}; step logs in {logs}",
                                                              highlight=False),
                               on_step=lambda step: console.print(step.line, highlight=False),
                               since=since, until=until, last_weeks=last_weeks,
                               runner="inline" if runner == "inline" else "kfp")
    except MLOpsError as exc:
        _fail(exc, see=logs)
    # A canary keeps production where it was: the line says so, and what to run next.
    served = outcome.rollout or f"serving alias -> version {outcome.production_version}"
    console.print(f"done in {time.monotonic() - started:.0f} s: MLflow run {outcome.run_id}, "
                  f"registered version {outcome.version}, decision [bold]{outcome.decision}[/]; {served}",
                  highlight=False)


def _kfp_host(host: str | None, settings: Settings) -> str:
    if host or settings.kfp_host:
        return str(host or settings.kfp_host)
    _error_exit("no Kubeflow Pipelines endpoint: pass --host or set MLOPS_KFP_HOST", 2)


@pipeline_app.command("submit")
def submit_command(
    source: Annotated[str, typer.Argument(help="Path or URL of raw transactions, readable from the cluster.")],
    host: Annotated[str | None, typer.Option(help="KFP endpoint (default MLOPS_KFP_HOST).")] = None,
    experiment: Annotated[str | None, typer.Option(help="KFP experiment (default MLOPS_EXPERIMENT).")] = None,
    run_name: Annotated[str, typer.Option(help="Run name.")] = "",
) -> None:
    """Start one run of the compiled pipeline on Kubeflow Pipelines."""
    from pipelines.orchestration.kfp_remote import submit

    settings = _settings()
    run = submit(_kfp_host(host, settings), source, experiment=experiment or settings.experiment,
                 run_name=run_name)
    console.print(f"submitted run {run.name} ({run.id}) in experiment {run.experiment_id}")


@pipeline_app.command("schedule")
def schedule_command(
    source: Annotated[str, typer.Argument(help="Path or URL of raw transactions, readable from the cluster.")],
    cron: Annotated[str, typer.Option(help="When to run: 5-field cron, or KFP's 6 fields.")] = "0 3 * * 1",
    host: Annotated[str | None, typer.Option(help="KFP endpoint (default MLOPS_KFP_HOST).")] = None,
    experiment: Annotated[str | None, typer.Option(help="KFP experiment (default MLOPS_EXPERIMENT).")] = None,
    name: Annotated[str, typer.Option(help="Recurring run name.")] = "weekly-retraining",
    last_weeks: Annotated[int, typer.Option(min=0, help="Each run trains on the last N weeks before it "
                                                      "(0: all data).")] = 4,
) -> None:
    """Create a recurring run of the compiled pipeline (default: weekly, Mondays 03:00, on the last 4 weeks)."""
    from pipelines.orchestration.kfp_remote import schedule

    settings = _settings()
    recurring = schedule(_kfp_host(host, settings), source, cron=cron,
                         experiment=experiment or settings.experiment, name=name, last_weeks=last_weeks)
    console.print(f"scheduled {recurring.name} ({recurring.id}) in experiment {recurring.experiment_id}")


def demo_command(
    rows: Annotated[int | None, typer.Option(help="Transactions to generate (default MLOPS_DEMO_ROWS).")] = None,
) -> None:
    """Generate data, run the pipeline, serve the model, send sample transactions, stop."""
    from pipelines.demo import run_demo
    from pipelines.settings import PipelineSettings

    settings = _settings(PipelineSettings)
    run_demo(settings, rows or settings.demo_rows, console)
