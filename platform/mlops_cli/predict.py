"""`mlops predict FILE --out FILE [--version V]`: batch scoring from the command line.

Arguments are checked before anything heavy is imported, so a mistyped path answers at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.output import console, error_exit, load_settings


def predict_command(
    source: Annotated[Path, typer.Argument(help="Parquet file or folder of transactions (the contract's columns).")],
    out: Annotated[Path, typer.Option("--out", help="Parquet file to write: the rows, their features, "
                                                    "probability, decision, model_version.")],
    version: Annotated[str | None, typer.Option(help="Registered version to score with "
                                                     "(default: the serving alias's).")] = None,
) -> None:
    """Score every transaction of a file with its point-in-time features, in batches."""
    if not source.exists():
        error_exit(f"no such file or folder: {source}", 2)
    if source.is_file() and source.suffix != ".parquet":
        error_exit(f"{source} is not a Parquet file (.parquet)", 2)
    if out.suffix != ".parquet":
        error_exit(f"--out {out} must name a .parquet file", 2)
    if out.resolve() == source.resolve():
        error_exit("--out must differ from the input", 2)
    if version is not None and not version.isdigit():
        error_exit(f"--version {version!r} is not a version number", 2)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from mlops.batch_scoring import score_file
    from mlops.contract import load_contract

    settings = load_settings()
    contract = load_contract(settings.contract_path)
    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("features and scores", total=None)
        summary = score_file(source, out, contract, settings, version=version,
                             progress=lambda done, total: bar.update(task, completed=done, total=total))
    console.print(f"scored {summary.rows:,} rows with version {summary.model_version} "
                  f"(threshold {summary.threshold:.3f}): {summary.positives:,} {contract.decisions.positive} decisions "
                  f"-> {summary.out} "
                  f"in {summary.seconds:.1f} s")
