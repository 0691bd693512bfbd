"""What every ``mlops`` command shares: the consoles, the one-line error exits, the time options and
settings loading.

An expected failure prints one line naming the cause (and a second naming the file with details)
and exits with the error's code, never a traceback.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

import typer
from rich.console import Console
from typer.core import TyperGroup

from mlops.errors import MLOpsError

if TYPE_CHECKING:  # settings (pydantic-settings) load after a command's own argument checks
    from typer._click.core import Context  # typer vendors click; TyperGroup.invoke takes its Context

    from mlops.settings import Settings

    DeployableSettings = TypeVar("DeployableSettings", bound=Settings)

_DURATION_UNITS = {"m": "minutes", "h": "hours", "d": "days"}

# Piped output (make, CI logs) would otherwise be cut to 80 columns, squeezing the demo's table.
console = Console(width=None if sys.stdout.isatty() else 140, soft_wrap=True)
err_console = Console(stderr=True)


def error_exit(message: str, code: int) -> NoReturn:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def fail(exc: MLOpsError, *, see: Path | None = None) -> NoReturn:
    """One line naming the error; a second naming the file with the details, when there is one."""
    err_console.print(f"[bold red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
    if see is not None and see.exists():
        err_console.print(f"details: {see}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


class OneLineErrors(TyperGroup):
    """The root command: an expected failure (MLOpsError) raised by any command under it prints one
    line and exits with the error's code, so no command catches them itself."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except MLOpsError as exc:
            fail(exc)


def hint(message: str, *, to: Console | None = None) -> None:
    """What to do next, printed where a command found nothing to show."""
    (to or console).print(f"[dim]hint:[/] {message}", highlight=False)


def since_start(since: str | None, option: str = "--since") -> datetime | None:
    """The start of a window given as a duration back from now (30m, 6h, 7d); a bad one exits 2."""
    if since is None:
        return None
    if len(since) < 2 or since[-1] not in _DURATION_UNITS or not since[:-1].isdigit():
        error_exit(f"{option} must be a duration such as 30m, 6h or 7d, got {since!r}", 2)
    return datetime.now(UTC) - timedelta(**{_DURATION_UNITS[since[-1]]: int(since[:-1])})


def time_or_now(value: str | None, option: str) -> datetime:
    """An ISO 8601 time (naive = UTC), or now when not given; a bad value exits 2 naming the option."""
    from mlops.data.training_window import parse_time

    if value is None:
        return datetime.now(UTC)
    return parse_time(value, option)


@overload
def load_settings() -> Settings: ...


@overload
def load_settings(kind: type[DeployableSettings]) -> DeployableSettings: ...


def load_settings(kind: type[Settings] | None = None) -> Settings:
    """The settings (the base, or a deployable's ``kind``), or exit 2 naming what is wrong with them
    (a variable, the params file)."""
    from pydantic import ValidationError

    from mlops.settings import PARAMS_FILE_VARIABLE, Settings

    try:
        return (kind or Settings)()
    except ValidationError as exc:
        params_file = os.environ.get(PARAMS_FILE_VARIABLE)
        source = f"MLOPS_* setting or in {PARAMS_FILE_VARIABLE}={params_file}" if params_file else "MLOPS_* setting"
        error_exit(f"invalid {source}: {exc}", 2)
