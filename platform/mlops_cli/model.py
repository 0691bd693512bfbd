"""``mlops model ...``: the model registry: list the versions, promote (or start a canary), roll back,
the audit history of alias moves, and ``canary status|judge`` (monitoring/canary.py); ``export``
lives in model_export.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mlops_cli.model_export import export_command
from mlops_cli.output import console, hint
from mlops_cli.output import error_exit as _error_exit
from mlops_cli.output import load_settings as _settings

if TYPE_CHECKING:
    from monitoring.canary import CanaryRun

model_app = typer.Typer(help="Inspect the model registry; promote, roll back, audit history.", no_args_is_help=True)
model_app.command("export")(export_command)
canary_app = typer.Typer(help="Judge the running canary against the champion; promote or roll it back.",
                         no_args_is_help=True)
model_app.add_typer(canary_app, name="canary")


@model_app.command("list")
def list_command() -> None:
    """Registered versions with their aliases and decision tags."""
    from rich.table import Table

    from mlops import registry

    settings = _settings()
    table = Table("version", "aliases", "decision", "candidate F1", "reason")
    rows = registry.list_versions(settings)
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
    if canary is not None:
        registry.start_canary(settings, version, canary, actor=_actor(), reason=reason)
        console.print(f"{settings.model_name} version {version}: canary on {canary:g} % of /predict traffic")
        return
    previous = registry.promote(settings, version, alias=alias, actor=_actor(), reason=reason or "manual")
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
    change = registry.rollback(settings, actor=_actor(), reason=reason or "rollback", alias=alias)
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
    changes = registry.history(settings, alias)
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


def _run(act: bool) -> CanaryRun:
    from monitoring.canary import run_canary
    from monitoring.settings import MonitoringSettings

    run = run_canary(_settings(MonitoringSettings), act=act, actor=_actor())
    verdict = run.verdict
    since = f"since {run.since:%Y-%m-%d %H:%M:%S} UTC" if run.since else "over the whole log"
    console.print(f"canary v{verdict.canary_version} ({verdict.canary_rows:,} rows) vs champion "
                  f"v{verdict.champion_version} ({verdict.champion_rows:,} rows) {since}", highlight=False)
    for check in verdict.checks:
        console.print(check.line(), highlight=False)
    console.print(f"verdict: [bold]{verdict.verdict}[/]", highlight=False)
    return run


@canary_app.command("status")
def status_command() -> None:
    """Each check of the running canary (both arms' figures, pass/fail/not judged yet) and the verdict;
    changes nothing. Exit 2 when no canary runs."""
    _run(act=False)


@canary_app.command("judge")
def judge_command(
    if_running: Annotated[bool, typer.Option("--if-running", help="No canary running is not an error (exit 0): "
                                                                   "for a schedule.")] = False,
) -> None:
    """Judge the running canary and act: promote (production moves to the canary, the previous version
    archived), roll back (the canary ends, its version tagged rejected), or wait (nothing). Each move is
    audited with the verdict's figures (`mlops model history`). Exit 2 when no canary runs."""
    if if_running:
        from mlops import registry

        settings = _settings()
        if registry.canary(settings) is None:
            console.print(f"no canary of {settings.model_name} is running: nothing to judge", highlight=False)
            return
    console.print(f"action: {_run(act=True).action}", highlight=False)
