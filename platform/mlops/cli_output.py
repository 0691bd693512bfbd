"""What every ``mlops`` command shares: the consoles, the one-line error exits and settings loading.

An expected failure prints one line naming the cause (and a second naming the file with details)
and exits with the error's code, never a traceback.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from mlops.errors import MLOpsError
from mlops.settings import PARAMS_FILE_VARIABLE, Settings

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


def load_settings() -> Settings:
    """The settings, or exit 2 naming what is wrong with them (a variable, the params file)."""
    from pydantic import ValidationError

    try:
        return Settings()
    except ValidationError as exc:
        params_file = os.environ.get(PARAMS_FILE_VARIABLE)
        source = f"MLOPS_* setting or in {PARAMS_FILE_VARIABLE}={params_file}" if params_file else "MLOPS_* setting"
        error_exit(f"invalid {source}: {exc}", 2)
    except MLOpsError as exc:
        fail(exc)
