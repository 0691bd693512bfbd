"""The ``mlops`` command line. Commands name pipelines/ and serving/ lazily (inside functions),
so the core never imports them at import time. Errors print one line and exit non-zero:
2 for bad input (including data that breaks its contract), 1 for everything else."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from mlops.errors import MLOpsError
from mlops.settings import Settings

if TYPE_CHECKING:
    from monitoring.window import WindowSpec

app = typer.Typer(help="MLOps platform: data -> validated features -> model -> registry -> endpoint.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
data_app = typer.Typer(help="Generate and ingest raw data.", no_args_is_help=True)
pipeline_app = typer.Typer(help="Compile and run the training pipeline.", no_args_is_help=True)
model_app = typer.Typer(help="Inspect the model registry.", no_args_is_help=True)
features_app = typer.Typer(help="Online feature state and training/serving skew.", no_args_is_help=True)
drift_app = typer.Typer(help="Drift of live traffic against the training reference, and its actions.",
                        no_args_is_help=True)
labels_app = typer.Typer(help="Late labels and the model quality they reveal.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(features_app, name="features")
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(model_app, name="model")
app.add_typer(drift_app, name="drift")
app.add_typer(labels_app, name="labels")
# Piped output (make, CI logs) would otherwise be cut to 80 columns, squeezing the demo's table.
console = Console(width=None if sys.stdout.isatty() else 140, soft_wrap=True)
err_console = Console(stderr=True)


def _error_exit(message: str, code: int) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _fail(exc: MLOpsError) -> NoReturn:
    _error_exit(exc.message, exc.exit_code)


def _settings() -> Settings:
    from pydantic import ValidationError

    try:
        return Settings()
    except ValidationError as exc:
        _error_exit(f"invalid MLOPS_* setting: {exc}", 2)


@data_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option(help="Where to write the data (.parquet or .csv).")],
    rows: Annotated[int, typer.Option(min=100, help="Number of transactions.")] = 60_000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 42,
    scenario: Annotated[str, typer.Option(help="Drift scenario (none, amount_inflation, ...).")] = "none",
    fraud_rate: Annotated[float, typer.Option(min=0.001, max=0.2, help="Share of fraud.")] = 0.015,
) -> None:
    """Write seeded synthetic card transactions."""
    from mlops.data.generator import SCENARIOS, generate_transactions

    if scenario not in SCENARIOS:
        _error_exit(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}", 2)
    if out.suffix not in {".parquet", ".csv"}:
        _error_exit(f"--out must end in .parquet or .csv, got {out.name!r}", 2)
    with console.status(f"generating {rows:,} transactions"):
        frame = generate_transactions(rows, seed=seed, scenario=scenario, fraud_rate=fraud_rate)  # type: ignore[arg-type]
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix == ".csv":
            frame.to_csv(out, index=False)
        else:
            frame.to_parquet(out, index=False)
    console.print(f"wrote {len(frame):,} transactions ({frame['is_fraud'].mean():.2%} fraud) to {out}")


@data_app.command("ingest")
def ingest_command(source: Annotated[str, typer.Argument(help="CSV/Parquet path or URL.")]) -> None:
    """Snapshot a source into the immutable snapshot store and print its hash."""
    from mlops.contract import load_contract
    from mlops.data.ingest import ingest

    settings = _settings()
    try:
        snapshot = ingest(source, settings.snapshots_dir, load_contract(settings.contract_path))
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"snapshot {snapshot.sha256} ({snapshot.rows:,} rows) at {snapshot.path}")


@pipeline_app.command("compile")
def compile_command(
    check: Annotated[bool, typer.Option(help="Only check that the committed YAML is current.")] = False,
) -> None:
    """Compile the pipeline to IR YAML (pipelines/training_pipeline.yaml)."""
    import tempfile

    from pipelines.pipeline import COMPILED_PIPELINE, compile_pipeline

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
) -> None:
    """Run the compiled pipeline locally with kfp.local."""
    from pipelines.runner import run_pipeline

    settings = _settings()
    try:
        outcome = run_pipeline(source, settings, run_name=run_name or None)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"run {outcome.run_name} ({outcome.run_id}): registered version {outcome.version}, "
                  f"decision [bold]{outcome.decision}[/]; serving alias -> version {outcome.production_version}")


def _parse_time(value: str | None, option: str) -> datetime:
    """An ISO 8601 time (naive = UTC), or now when not given; a bad value exits 2 naming the option."""
    if value is None:
        return datetime.now(UTC)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        _error_exit(f"{option} must be an ISO 8601 time such as 2026-03-01T12:00:00Z, got {value!r}", 2)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@features_app.command("materialize")
def materialize_command(
    end: Annotated[str | None, typer.Option(help="Load the entity histories as of this time (default: now).")] = None,
) -> None:
    """Merge the offline entity histories into the online store (incremental, never erases newer events)."""
    from mlops.contract import load_contract
    from mlops.online_features import materialize_online

    settings = _settings()
    until = _parse_time(end, "--end")
    try:
        with console.status("materializing the online store"):
            written = materialize_online(settings, load_contract(settings.contract_path), until)
    except MLOpsError as exc:
        _fail(exc)
    counts = ", ".join(f"{name} {count:,} entities" for name, count in written.items())
    console.print(f"online store as of {until.isoformat()}: {counts}")


@features_app.command("skew")
def skew_command(
    sample: Annotated[int, typer.Option(min=1, help="Logged predictions to compare.")] = 500,
    threshold: Annotated[float, typer.Option(min=0, max=1, help="Largest share of differing predictions.")] = 0.0,
    tolerance: Annotated[float, typer.Option(min=0, help="Largest absolute difference counted as equal.")] = 1e-9,
) -> None:
    """Served features vs offline point-in-time features; exits 1 when the differing share is above threshold."""
    from mlops.contract import load_contract
    from mlops.errors import FeatureSkewError
    from mlops.feature_skew import check_skew

    settings = _settings()
    try:
        report = check_skew(settings, load_contract(settings.contract_path), sample=sample, tolerance=tolerance)
    except MLOpsError as exc:
        _fail(exc)
    worst = f" ({report.worst_feature} of {report.worst_event})" if report.worst_feature else ""
    console.print(f"compared {report.compared:,} of {report.logged:,} logged predictions "
                  f"({report.beyond_offline:,} newer than the offline store, not compared): "
                  f"{report.share_differing:.2%} differ by more than {tolerance:g}; "
                  f"largest difference {report.max_abs_diff:.3g}{worst}", highlight=False)
    if report.share_differing > threshold:
        _fail(FeatureSkewError(f"feature skew {report.share_differing:.2%} is above the threshold {threshold:.2%}"))


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
    from pipelines.kfp_remote import submit

    settings = _settings()
    try:
        run = submit(_kfp_host(host, settings), source, experiment=experiment or settings.experiment,
                     run_name=run_name)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"submitted run {run.name} ({run.id}) in experiment {run.experiment_id}")


@pipeline_app.command("schedule")
def schedule_command(
    source: Annotated[str, typer.Argument(help="Path or URL of raw transactions, readable from the cluster.")],
    cron: Annotated[str, typer.Option(help="When to run: 5-field cron, or KFP's 6 fields.")] = "0 3 * * 1",
    host: Annotated[str | None, typer.Option(help="KFP endpoint (default MLOPS_KFP_HOST).")] = None,
    experiment: Annotated[str | None, typer.Option(help="KFP experiment (default MLOPS_EXPERIMENT).")] = None,
    name: Annotated[str, typer.Option(help="Recurring run name.")] = "weekly-retraining",
) -> None:
    """Create a recurring run of the compiled pipeline (default: weekly, Mondays 03:00)."""
    from pipelines.kfp_remote import schedule

    settings = _settings()
    try:
        recurring = schedule(_kfp_host(host, settings), source, cron=cron,
                             experiment=experiment or settings.experiment, name=name)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"scheduled {recurring.name} ({recurring.id}) in experiment {recurring.experiment_id}")


@model_app.command("list")
def list_command() -> None:
    """Registered versions with their aliases and decision tags."""
    from mlops import registry

    settings = _settings()
    table = Table("version", "aliases", "decision", "candidate F1", "reason")
    for row in registry.list_versions(settings):
        table.add_row(row["version"], row["aliases"], row.get("decision", ""), row.get("candidate_f1", ""),
                      row.get("decision_reason", ""))
    console.print(table)


def _window_spec(since: str | None, start: str | None, end: str | None, last: int | None) -> WindowSpec:
    from datetime import timedelta

    from monitoring.window import WindowSpec

    if since is not None and start is not None:
        _error_exit("give --since or --start, not both", 2)
    begin = _parse_time(start, "--start") if start else None
    if since is not None:
        units = {"m": "minutes", "h": "hours", "d": "days"}
        if len(since) < 2 or since[-1] not in units or not since[:-1].isdigit():
            _error_exit(f"--since must be a duration such as 30m, 6h or 7d, got {since!r}", 2)
        begin = datetime.now(UTC) - timedelta(**{units[since[-1]]: int(since[:-1])})
    return WindowSpec(start=begin, end=_parse_time(end, "--end") if end else None, last=last)


@drift_app.command("run")
def drift_run_command(
    since: Annotated[str | None, typer.Option(help="Window: predictions of the last 30m, 6h, 7d ...")] = None,
    start: Annotated[str | None, typer.Option(help="Window start (ISO 8601).")] = None,
    end: Annotated[str | None, typer.Option(help="Window end (ISO 8601, exclusive).")] = None,
    last: Annotated[int | None, typer.Option(min=1, help="Only the newest N predictions of the window.")] = None,
) -> None:
    """Judge the window's drift against the serving model's reference profile and act on the level.

    Exit codes: 0 a verdict (INFO, WARNING or CRITICAL, actions done), 1 an action failed,
    2 bad options, 4 no reference profile for the model, 5 empty window, 6 too few rows.
    """
    from monitoring.job import run_drift

    settings = _settings()
    try:
        record = run_drift(settings, _window_spec(since, start, end, last))
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"drift [bold]{record.level}[/] on {record.rows:,} predictions of model versions "
                  f"{', '.join(record.model_versions)}: {record.reason}", highlight=False)
    console.print(f"actions: {', '.join(record.actions)}; reports: {', '.join(record.report_paths)}", highlight=False)
    if record.action_errors:
        _error_exit("; ".join(record.action_errors), 1)


@drift_app.command("history")
def drift_history_command(
    limit: Annotated[int, typer.Option(min=1, help="Newest runs to show.")] = 20,
) -> None:
    """Every drift run: when, which window, the level, why, and what was done."""
    from monitoring.actions import read_history

    table = Table("run at", "versions", "rows", "level", "actions", "reason")
    for record in read_history(_settings().monitoring_dir)[-limit:]:
        done = ", ".join(record.actions) + "".join(f" [failed {e}]" for e in record.action_errors)
        table.add_row(f"{record.run_at:%Y-%m-%d %H:%M:%S}", ",".join(record.model_versions), f"{record.rows:,}",
                      record.level, done, record.reason)
    console.print(table)


@labels_app.command("ingest")
def labels_ingest_command(
    source: Annotated[Path, typer.Argument(help="CSV/Parquet of ids (transaction_id) and labels (is_fraud).")],
) -> None:
    """Store late labels by transaction id (a later label for the same id replaces the earlier one)."""
    from mlops.contract import load_contract
    from monitoring.labels import ingest_labels

    settings = _settings()
    try:
        read, stored = ingest_labels(source, load_contract(settings.contract_path), settings.monitoring_dir)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"ingested {read:,} labels from {source}; {stored:,} labels stored")


@labels_app.command("quality")
def labels_quality_command(
    window: Annotated[str, typer.Option(help="Bucket size (pandas frequency: 1h, 1D ...).")] = "1h",
    since: Annotated[str | None, typer.Option(help="Predictions of the last 30m, 6h, 7d ...")] = None,
) -> None:
    """Precision, recall, F1 and PR-AUC of the labelled predictions per window and model version."""
    from monitoring.quality_job import run_quality

    settings = _settings()
    try:
        rows = run_quality(settings, _window_spec(since, None, None, None), window)
    except MLOpsError as exc:
        _fail(exc)
    table = Table("window start", "version", "role", "labelled", "positives", "precision", "recall", "F1", "PR-AUC")
    for row in rows:
        table.add_row(row.window_start, row.model_version, row.role, f"{row.labelled:,}", f"{row.positives:,}",
                      f"{row.precision:.3f}", f"{row.recall:.3f}", f"{row.f1:.3f}", f"{row.pr_auc:.3f}")
    console.print(table)


@app.command("serve")
def serve_command() -> None:
    """Serve the production model over REST (host/port from MLOPS_HOST / MLOPS_PORT)."""
    from serving.main import run

    settings = _settings()
    run(settings)


@app.command("demo")
def demo_command(
    rows: Annotated[int | None, typer.Option(help="Transactions to generate (default MLOPS_DEMO_ROWS).")] = None,
) -> None:
    """Generate data, run the pipeline, serve the model, send sample transactions, stop."""
    from pipelines.demo import run_demo

    settings = _settings()
    try:
        run_demo(settings, rows or settings.demo_rows, console)
    except MLOpsError as exc:
        _fail(exc)


if __name__ == "__main__":
    app()
