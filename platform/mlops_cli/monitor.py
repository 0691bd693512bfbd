"""``mlops drift ...`` and ``mlops labels ...``: live traffic judged against the training reference
(and the actions its level triggers), and the late labels with the model quality they reveal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mlops_cli.output import console, hint, since_start, time_or_now
from mlops_cli.output import error_exit as _error_exit
from mlops_cli.output import load_settings as _settings

if TYPE_CHECKING:
    from monitoring.labels import QualityRow
    from monitoring.window import WindowSpec

drift_app = typer.Typer(help="Drift of live traffic against the training reference, and its actions.",
                        no_args_is_help=True)
labels_app = typer.Typer(help="Late labels and the model quality they reveal.", no_args_is_help=True)


def _window_spec(since: str | None, start: str | None, end: str | None, last: int | None) -> WindowSpec:
    if since is not None and start is not None:
        _error_exit("give --since or --start, not both", 2)
    begin = since_start(since) if since is not None else time_or_now(start, "--start") if start else None
    finish = time_or_now(end, "--end") if end else None
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

    record = run_drift(settings, window)
    versions = ", ".join(f"v{v}" for v in record.model_versions)  # the prefix of the reason's and worst's names
    console.print(f"drift [bold]{record.level}[/] on {record.rows:,} predictions of {record.model_name} {versions}: "
                  f"{record.reason}", highlight=False)
    console.print(f"actions: {', '.join(record.actions)}; reports: {', '.join(record.report_paths)}", highlight=False)
    console.print(f"worst features: {'; '.join(record.worst)}", highlight=False)
    for estimated in record.estimates:
        f1, reference = estimated.estimate.f1, estimated.reference
        against = f" (reference {reference.f1.estimate:.3f})" if reference is not None else ""
        console.print(f"estimated quality v{estimated.model_version}/{estimated.role} [bold]{estimated.level}[/]: "
                      f"F1 {f1.estimate:.3f} [{f1.low:.3f}, {f1.high:.3f}]{against}, PR-AUC "
                      f"{estimated.estimate.pr_auc.estimate:.3f}" + (f"; {estimated.note}" if estimated.note else ""),
                      highlight=False)
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
        table.add_row(f"{record.run_at:%Y-%m-%d %H:%M:%S}", ",".join(f"v{v}" for v in record.model_versions),
                      f"{record.rows:,}", record.level, done, record.reason)
    console.print(table)


@labels_app.command("ingest")
def labels_ingest_command(
    source: Annotated[Path, typer.Argument(help="CSV/Parquet of the contract's id and label columns.")],
) -> None:
    """Store late labels by id (a later label for the same id replaces the earlier one).

    With label features in the contract, each stored label not delivered yet (a new id or a changed
    verdict) is then set on its event in the online histories of the event's entities; a label whose
    prediction is not logged yet waits for the next ingest.
    """
    if not source.is_file():
        _error_exit(f"label file not found: {source}", 2)
    from mlops.contract import load_contract
    from monitoring.label_features import deliver_new_labels, uses_labels
    from monitoring.labels import ingest_labels

    settings = _settings()
    contract = load_contract(settings.contract_path)
    read, stored = ingest_labels(source, contract, settings.monitoring_dir)
    console.print(f"ingested {read:,} labels from {source}; {stored:,} labels stored")
    if uses_labels(contract):
        delivery = deliver_new_labels(settings, contract)
        console.print(f"online label features: {delivery.labels:,} labels not delivered yet, {delivery.logged:,} "
                      f"with a logged prediction ({delivery.pending:,} wait for theirs); "
                      f"{delivery.histories:,} entity histories updated")


@labels_app.command("quality")
def labels_quality_command(
    window: Annotated[str, typer.Option(help="Bucket size (pandas frequency: 1h, 1D ...).")] = "1h",
    since: Annotated[str | None, typer.Option(help="Predictions of the last 30m, 6h, 7d ...")] = None,
) -> None:
    """Precision, recall, F1 and PR-AUC of the labelled predictions per window and model version, next to
    the F1 estimated from their probabilities and the calibration error (ECE) that says whether to trust it."""
    spec = _window_spec(since, None, None, None)
    from monitoring.settings import MonitoringSettings

    settings = _settings(MonitoringSettings)
    from rich.table import Table

    from monitoring.quality_job import run_quality

    rows = run_quality(settings, spec, window)
    if not rows:
        console.print("no labelled predictions in the window", highlight=False)
        hint("store late labels with `mlops labels ingest FILE` (a CSV/Parquet of the contract's id and label "
             "columns, for requests the service answered)")
        return
    table = Table("window start", "version", "role", "labelled", "positives", "precision", "recall", "F1", "PR-AUC")
    for row in rows:
        table.add_row(row.window_start, row.model_version, row.role, f"{row.labelled:,}", f"{row.positives:,}",
                      f"{row.precision:.3f}", f"{row.recall:.3f}", f"{row.f1:.3f}", f"{row.pr_auc:.3f}")
    console.print(table)
    _print_estimates(rows)


def _print_estimates(rows: list[QualityRow]) -> None:
    """The realized F1 and precision next to their estimate from the same predictions, and whether
    the calibration (ECE) lets the estimate be trusted."""
    from rich.table import Table

    table = Table("window start", "version", "role", "F1", "estimated F1 [95 %]", "precision",
                  "estimated precision [95 %]", "ECE", "estimate", title="realized vs estimated")
    for row in rows:
        if row.estimate is None:
            continue
        f1, precision = row.estimate.f1, row.estimate.precision
        table.add_row(row.window_start, row.model_version, row.role, f"{row.f1:.3f}",
                      f"{f1.estimate:.3f} [{f1.low:.3f}, {f1.high:.3f}]", f"{row.precision:.3f}",
                      f"{precision.estimate:.3f} [{precision.low:.3f}, {precision.high:.3f}]",
                      "-" if row.ece is None else f"{row.ece:.3f}", "unreliable" if row.unreliable else "trusted")
    console.print(table)
    for row in rows:
        if row.unreliable:
            console.print(f"{row.window_start} v{row.model_version}/{row.role}: estimate unreliable: {row.unreliable}",
                          highlight=False)
