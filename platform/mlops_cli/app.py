"""The ``mlops`` command line. Commands import pipelines/, serving/ and monitoring/ inside their
functions, so that a mistake is answered before they load. Errors print one line and exit non-zero:
2 for bad input (including data that breaks its contract), 1 for everything else.

Answering at once: this module imports only typer, rich's console and mlops.errors. A command
checks its arguments and files first, then loads settings, then imports what does the work
(pandas, MLflow, kfp, torch ...) inside its function, so a mistake is answered in about a second.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlops.errors import MLOpsError
from mlops_cli.init import register as register_init
from mlops_cli.model_export import export_command
from mlops_cli.output import console, hint, since_start
from mlops_cli.output import error_exit as _error_exit
from mlops_cli.output import fail as _fail
from mlops_cli.output import load_settings as _settings
from mlops_cli.predict import predict_command
from mlops_cli.predictions import predictions_app
from mlops_cli.step import step_app

if TYPE_CHECKING:
    from mlops.settings import Settings
    from monitoring.window import WindowSpec

# `mlops pipeline run --runner` (pipelines.orchestration.runner.Runner), checked before pipelines/ and kfp are imported.
PIPELINE_RUNNERS = ("kfp", "inline")
app = typer.Typer(help="MLOps platform: data -> validated features -> model -> registry -> endpoint.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
data_app = typer.Typer(help="Generate and ingest raw data.", no_args_is_help=True)
pipeline_app = typer.Typer(help="Compile and run the training pipeline.", no_args_is_help=True)
model_app = typer.Typer(help="Inspect the model registry; promote, roll back, audit history.", no_args_is_help=True)
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
app.add_typer(step_app, name="step")
register_init(app)
model_app.command("export")(export_command)
app.add_typer(predictions_app, name="predictions")


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        console.print(f"mlops {version('mlops-platform')}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """MLOps platform: data -> validated features -> model -> registry -> endpoint."""


@data_app.command("generate")
def generate(
    out: Annotated[Path, typer.Option(help="Where to write the data (.parquet or .csv).")],
    rows: Annotated[int, typer.Option(min=100, help="Number of transactions.")] = 60_000,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 42,
    scenario: Annotated[str, typer.Option(help="none, a drift (amount_inflation, ...), night_fraud.")] = "none",
    fraud_rate: Annotated[float, typer.Option(min=0.001, max=0.2, help="Share of fraud.")] = 0.015,
) -> None:
    """Write seeded synthetic card transactions (columns, categories and ranges from the contract)."""
    if out.suffix not in {".parquet", ".csv"}:
        _error_exit(f"--out must end in .parquet or .csv, got {out.name!r}", 2)
    from mlops.contract import load_contract
    from mlops.data.generator import SCENARIOS, write_transactions

    if scenario not in SCENARIOS:
        _error_exit(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}", 2)
    try:
        contract = load_contract(_settings().contract_path)
    except MLOpsError as exc:
        _fail(exc)
    with console.status(f"generating {rows:,} transactions"):
        fraud_share = write_transactions(out, rows, seed=seed, scenario=scenario,  # type: ignore[arg-type]
                                         fraud_rate=fraud_rate, contract=contract)
    console.print(f"wrote {rows:,} transactions ({fraud_share:.2%} fraud) to {out}")


@data_app.command("ingest")
def ingest_command(source: Annotated[str, typer.Argument(help="CSV/Parquet path or URL.")]) -> None:
    """Snapshot a source into the immutable snapshot store and print its hash."""
    from mlops.contract import load_contract
    from mlops.data.source_columns import check_source_columns
    from mlops.preflight import check_source

    settings = _settings()
    try:
        contract = load_contract(settings.contract_path)
        check_source(source)
        check_source_columns(source, contract)  # a missing column is named before pandas is even imported
        from mlops.data.ingest import ingest

        snapshot = ingest(source, settings.snapshots_dir, contract)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"snapshot {snapshot.sha256} ({snapshot.rows:,} rows) at {snapshot.path}")


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
    from mlops.preflight import check_source, check_tracking_server, check_tracking_store

    if runner not in PIPELINE_RUNNERS:
        _error_exit(f"--runner must be one of {', '.join(PIPELINE_RUNNERS)}, got {runner!r}", 2)
    try:  # refused before settings, kfp, pandas and MLflow are even imported
        resolve_window(since, until, last_weeks)
        check_source(source)
    except MLOpsError as exc:
        _fail(exc)
    from mlops.run_lock import exclusive_pipeline_run

    settings = _settings()
    try:
        check_source_columns(source, load_contract(settings.contract_path))
        with exclusive_pipeline_run(settings):
            check_tracking_server(settings.resolved_tracking_uri)
            if settings.tracking_uri:  # an explicit local store must exist; the home's is made on its first run
                check_tracking_store(settings.tracking_uri)
            _run_locked(source, settings, run_name, verbose, (since, until, last_weeks), time.monotonic(), runner)
    except MLOpsError as exc:
        _fail(exc)


def _run_locked(source: str, settings: Settings, run_name: str, verbose: bool, window: tuple[str, str, int],
                started: float, runner: str = "kfp") -> None:
    """The pipeline run of ``mlops pipeline run``, under the run lock."""
    import time

    from pipelines.orchestration.runner import new_run_name, run_log_path, run_pipeline

    name = run_name or new_run_name()
    logs = run_log_path(settings, name)
    console.print(f"pipeline run {name}; step logs in {logs}", highlight=False)
    since, until, last_weeks = window
    try:
        outcome = run_pipeline(source, settings, run_name=name, verbose=verbose,
                               on_step=lambda step: console.print(step.line, highlight=False),
                               since=since, until=until, last_weeks=last_weeks,
                               runner="inline" if runner == "inline" else "kfp")
    except MLOpsError as exc:
        _fail(exc, see=logs)
    console.print(f"done in {time.monotonic() - started:.0f} s: MLflow run {outcome.run_id}, "
                  f"registered version {outcome.version}, "
                  f"decision [bold]{outcome.decision}[/]; serving alias -> version {outcome.production_version}",
                  highlight=False)


def _parse_time(value: str | None, option: str) -> datetime:
    """An ISO 8601 time (naive = UTC), or now when not given; a bad value exits 2 naming the option."""
    from mlops.data.training_window import parse_time

    if value is None:
        return datetime.now(UTC)
    try:
        return parse_time(value, option)
    except MLOpsError as exc:
        _fail(exc)


@features_app.command("materialize")
def materialize_command(
    end: Annotated[str | None, typer.Option(help="Load the entity histories as of this time (default: now).")] = None,
) -> None:
    """Merge the offline entity histories into the online store (incremental, never erases newer events)."""
    until = _parse_time(end, "--end")
    from feature_repo.store import materialize_online
    from mlops.contract import load_contract

    settings = _settings()
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
    from pipelines.orchestration.kfp_remote import submit

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
    last_weeks: Annotated[int, typer.Option(min=0, help="Each run trains on the last N weeks before it "
                                                      "(0: all data).")] = 4,
) -> None:
    """Create a recurring run of the compiled pipeline (default: weekly, Mondays 03:00, on the last 4 weeks)."""
    from pipelines.orchestration.kfp_remote import schedule

    settings = _settings()
    try:
        recurring = schedule(_kfp_host(host, settings), source, cron=cron,
                             experiment=experiment or settings.experiment, name=name, last_weeks=last_weeks)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"scheduled {recurring.name} ({recurring.id}) in experiment {recurring.experiment_id}")


@app.command("train")
def train_command(
    data_dir: Annotated[Path | None, typer.Option(help="Folder with train/validation/test.parquet.")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Where model.pt, training.json and onnx/ go.")] = None,
    checkpoint_dir: Annotated[str | None, typer.Option(
        help="Local path or fsspec URL for checkpoints (default MLOPS_CHECKPOINT_DIR).")] = None,
    run_id: Annotated[str | None, typer.Option(help="MLflow run to log into (default: a new run).")] = None,
    reproduce: Annotated[str | None, typer.Option(help="Re-run this MLflow run from its recorded inputs.")] = None,
    search: Annotated[int, typer.Option(min=0, help="Optuna trials before training with the best.")] = 0,
) -> None:
    """Train, export ONNX and score the test split (also under torchrun); --search, --reproduce."""
    from pipelines.splits import split_paths

    if reproduce is not None and (data_dir is not None or search or run_id is not None):
        _error_exit("--reproduce takes no --data-dir, --run-id or --search: it reuses the run's inputs", 2)
    if reproduce is None and data_dir is None:
        _error_exit("--data-dir is required (or --reproduce RUN_ID)", 2)
    try:
        paths = split_paths(data_dir) if data_dir is not None else {}
    except MLOpsError as exc:
        _fail(exc)
    settings = _settings()
    from rich.table import Table

    from pipelines.logs import configure_logging
    from pipelines.training.checkpoint import TrainingPreempted
    from pipelines.training.command import reproduce as reproduce_run
    from pipelines.training.command import train_and_export

    configure_logging()
    out = out_dir or settings.runs_dir / "train"
    try:
        if reproduce is not None:
            report, compared = reproduce_run(reproduce, out, settings)
            table = Table("", f"run {reproduce}", f"reproduced ({report.run_id})", "same")
            for name, (then, now) in compared.items():
                table.add_row(name, then, now, "yes" if then == now else "[bold red]NO[/]")
            console.print(table)
            if any(then != now for then, now in compared.values()):
                _error_exit("the reproduced run differs from the original", 1)
            return
        checkpoints = checkpoint_dir or settings.resolved_checkpoint_dir
        params = None
        if search:
            from pipelines.training.command import new_run
            from pipelines.training.search import search as run_search

            run_id = run_id or new_run(settings, {"entry": "mlops train --search"})
            params = run_search(paths, search, settings, run_id)
        result = train_and_export(paths, out, checkpoints, settings, run_id=run_id, params=params)
    except TrainingPreempted as exc:
        _error_exit(exc.message, exc.exit_code)
    except MLOpsError as exc:
        _fail(exc)
    if result is not None:
        metrics = ", ".join(f"{k} {v:.4f}" for k, v in result.metrics.items() if k in _SHOWN_METRICS)
        console.print(f"run {result.run_id}: {metrics}; ONNX {result.onnx_path} (sha256 {result.onnx_sha256[:12]})")


_SHOWN_METRICS = ("test_f1", "test_pr_auc", "test_brier", "test_ece")


@model_app.command("list")
def list_command() -> None:
    """Registered versions with their aliases and decision tags."""
    from rich.table import Table

    from mlops import registry

    settings = _settings()
    table = Table("version", "aliases", "decision", "candidate F1", "reason")
    try:
        rows = registry.list_versions(settings)
    except MLOpsError as exc:
        _fail(exc)
    if not rows:
        console.print(f"no versions of {settings.model_name} registered in {settings.resolved_tracking_uri}",
                      highlight=False)
        hint("train and register one with `mlops pipeline run data/tx.parquet` (make the data with "
             "`mlops data generate --out data/tx.parquet`), or run `make demo`")
        return
    for row in rows:
        table.add_row(row["version"], row["aliases"], row.get("decision", ""), row.get("candidate_f1", ""),
                      row.get("decision_reason", ""))
    console.print(table)


def _actor() -> str:
    import getpass
    import socket

    return f"{getpass.getuser()}@{socket.gethostname()}"


@model_app.command("promote")
def promote_command(
    version: Annotated[str, typer.Argument(help="Registered version to serve.")],
    reason: Annotated[str, typer.Option(help="Why (kept in the audit record).")] = "",
    alias: Annotated[str | None, typer.Option(help="Alias to move (default MLOPS_SERVING_ALIAS).")] = None,
    canary: Annotated[float | None, typer.Option(help="Instead: serve this percent of /predict from VERSION "
                                                      "(alias canary, sticky per customer).")] = None,
) -> None:
    """Point the serving alias (or --alias) at VERSION, with an audit record; the service follows.

    Promoting the canary's version to production ends the canary and archives the previous version."""
    if not version.isdigit():
        _error_exit(f"VERSION must be a version number, got {version!r}", 2)
    if canary is not None and not 0 < canary < 100:
        _error_exit(f"--canary must be a percent between 0 and 100 (exclusive), got {canary:g}", 2)
    from mlops import registry

    settings = _settings()
    try:
        if canary is not None:
            registry.start_canary(settings, version, canary, actor=_actor(), reason=reason)
            console.print(f"{settings.model_name} version {version}: canary on {canary:g} % of /predict traffic")
            return
        previous = registry.promote(settings, version, alias=alias, actor=_actor(), reason=reason or "manual")
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"{settings.model_name} alias {alias or settings.serving_alias!r}: {previous or 'none'} -> {version}")


@model_app.command("rollback")
def rollback_command(
    reason: Annotated[str, typer.Option(help="Why (kept in the audit record).")] = "",
    alias: Annotated[str | None, typer.Option(help="Alias to move back (default MLOPS_SERVING_ALIAS).")] = None,
) -> None:
    """End a running canary; else move the serving alias (or --alias) back to the version it held before
    its last move."""
    from mlops import registry

    settings = _settings()
    try:
        change = registry.rollback(settings, actor=_actor(), reason=reason or "rollback", alias=alias)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"{settings.model_name} alias {change.alias!r}: {change.from_version} -> "
                  f"{change.to_version or 'removed'}")


@model_app.command("history")
def history_command(
    alias: Annotated[str | None, typer.Option(help="Only this alias' moves.")] = None,
) -> None:
    """Every recorded alias move: when, which alias, from and to which version, who, why."""
    from rich.table import Table

    from mlops import registry

    settings = _settings()
    try:
        changes = registry.history(settings, alias)
    except MLOpsError as exc:
        _fail(exc)
    if not changes:
        console.print(f"no alias moves recorded for {settings.model_name}" + (f" alias {alias!r}" if alias else ""),
                      highlight=False)
        hint("a pipeline run that promotes a version records one; so does `mlops model promote VERSION`")
        return
    table = Table("when (UTC)", "alias", "from", "to", "who", "why")
    for c in changes:
        table.add_row(f"{c.at:%Y-%m-%d %H:%M:%S}", c.alias, c.from_version or "none", c.to_version or "removed",
                      c.actor, c.reason)
    console.print(table)


def _window_spec(since: str | None, start: str | None, end: str | None, last: int | None) -> WindowSpec:
    if since is not None and start is not None:
        _error_exit("give --since or --start, not both", 2)
    begin = since_start(since) if since is not None else _parse_time(start, "--start") if start else None
    finish = _parse_time(end, "--end") if end else None
    from monitoring.window import WindowSpec

    return WindowSpec(start=begin, end=finish, last=last)


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
    window = _window_spec(since, start, end, last)
    from monitoring.settings import MonitoringSettings

    settings = _settings(MonitoringSettings)
    from monitoring.job import run_drift

    try:
        record = run_drift(settings, window)
    except MLOpsError as exc:
        _fail(exc)
    console.print(f"drift [bold]{record.level}[/] on {record.rows:,} predictions of model versions "
                  f"{', '.join(record.model_versions)}: {record.reason}", highlight=False)
    console.print(f"actions: {', '.join(record.actions)}; reports: {', '.join(record.report_paths)}", highlight=False)
    console.print(f"worst features: {'; '.join(record.worst)}", highlight=False)
    if record.action_errors:
        _error_exit("; ".join(record.action_errors), 1)


@drift_app.command("history")
def drift_history_command(
    limit: Annotated[int, typer.Option(min=1, help="Newest runs to show.")] = 20,
) -> None:
    """Every drift run: when, which window, the level, why, and what was done."""
    from rich.table import Table

    from monitoring.actions import read_history

    records = read_history(_settings().monitoring_dir)[-limit:]
    if not records:
        console.print("no drift runs recorded yet", highlight=False)
        hint("judge the served traffic with `mlops drift run --since 1h` (it needs predictions: "
             "`make demo`, or `make serve` and POST to /predict)")
        return
    table = Table("run at", "versions", "rows", "level", "actions", "reason")
    for record in records:
        done = ", ".join(record.actions) + "".join(f" [failed {e}]" for e in record.action_errors)
        table.add_row(f"{record.run_at:%Y-%m-%d %H:%M:%S}", ",".join(record.model_versions), f"{record.rows:,}",
                      record.level, done, record.reason)
    console.print(table)


@labels_app.command("ingest")
def labels_ingest_command(
    source: Annotated[Path, typer.Argument(help="CSV/Parquet of ids (transaction_id) and labels (is_fraud).")],
) -> None:
    """Store late labels by transaction id (a later label for the same id replaces the earlier one)."""
    if not source.is_file():
        _error_exit(f"label file not found: {source}", 2)
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
    spec = _window_spec(since, None, None, None)
    settings = _settings()
    from rich.table import Table

    from monitoring.quality_job import run_quality

    try:
        rows = run_quality(settings, spec, window)
    except MLOpsError as exc:
        _fail(exc)
    if not rows:
        console.print("no labelled predictions in the window", highlight=False)
        hint("store late labels with `mlops labels ingest FILE` (a CSV/Parquet of transaction_id and is_fraud "
             "for transactions the service answered)")
        return
    table = Table("window start", "version", "role", "labelled", "positives", "precision", "recall", "F1", "PR-AUC")
    for row in rows:
        table.add_row(row.window_start, row.model_version, row.role, f"{row.labelled:,}", f"{row.positives:,}",
                      f"{row.precision:.3f}", f"{row.recall:.3f}", f"{row.f1:.3f}", f"{row.pr_auc:.3f}")
    console.print(table)


@app.command("serve")
def serve_command(
    workers: Annotated[int, typer.Option(min=1, max=64, help="Server processes sharing the port.")] = 1,
) -> None:
    """Serve the model holding the serving alias over REST (host/port from MLOPS_HOST / MLOPS_PORT)."""
    from serving.main import run
    from serving.settings import ServingSettings

    settings = _settings(ServingSettings)
    try:
        run(settings, workers=workers)
    except MLOpsError as exc:
        _fail(exc)


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


app.command("predict")(predict_command)
