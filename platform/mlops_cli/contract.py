"""``mlops contract ...``: draft a data contract from a user's own file, and check a file against a contract."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mlops_cli.output import console, hint
from mlops_cli.output import error_exit as _error_exit

contract_app = typer.Typer(help="Draft a data contract from your data; check data against a contract.",
                           no_args_is_help=True)
_DATA_ENDINGS = (".csv", ".csv.gz", ".tsv", ".parquet", ".pq")


def _check_data_path(data: Path) -> None:
    if not data.name.lower().endswith(_DATA_ENDINGS):
        _error_exit(f"DATA must be a CSV or Parquet file (ending in {', '.join(_DATA_ENDINGS)}), got {data.name!r}", 2)
    if not data.is_file():
        _error_exit(f"data file not found: {data}", 2)


@contract_app.command("draft")
def draft_command(
    data: Annotated[Path, typer.Argument(help="Your data: a CSV or Parquet file.")],
    out: Annotated[Path, typer.Option(help="Where to write the drafted contract (.yaml).")],
    label: Annotated[str | None, typer.Option(help="The 0/1 label column (default: found by its name).")] = None,
    name: Annotated[str | None, typer.Option(help="The contract's name (default: from the file name).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out when it exists.")] = False,
) -> None:
    """Draft a contract (dtypes, ranges, categories, id/timestamp/label, entities, features) to edit."""
    _check_data_path(data)
    if out.suffix not in {".yaml", ".yml"}:
        _error_exit(f"--out must end in .yaml or .yml, got {out.name!r}", 2)
    if out.exists() and not force:
        _error_exit(f"{out} exists (an edited contract?); pass --force to overwrite it", 2)
    from mlops.contract_draft import draft_contract

    with console.status(f"reading {data}"):
        draft = draft_contract(data, label=label, name=name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(draft.text)
    contract = draft.contract
    keys = ", ".join(e.join_key for e in contract.entities) or "none"
    console.print(f"drafted contract {contract.name!r} from {draft.rows:,} rows to {out}: id {contract.id_column}, "
                  f"timestamp {contract.timestamp_column}, label {contract.label_column}, entities {keys}, "
                  f"{len(contract.feature_names)} features, {len(contract.raw_inputs)} raw model inputs",
                  highlight=False)
    if draft.skipped:
        console.print(f"left out (a contract holds flat columns only): {', '.join(draft.skipped)}", highlight=False)
    hint(f"it is a draft: edit it, then run `mlops contract check {data} {out}`")


@contract_app.command("check")
def check_command(
    data: Annotated[Path, typer.Argument(help="A CSV or Parquet file.")],
    contract_path: Annotated[Path, typer.Argument(metavar="CONTRACT", help="The contract (.yaml).")],
) -> None:
    """List every mismatch between DATA and CONTRACT, one a line; exit 2 when there is one."""
    _check_data_path(data)
    if not contract_path.is_file():
        _error_exit(f"contract file not found: {contract_path}", 2)
    from mlops.contract import load_contract
    from mlops.contract_check import check_data

    contract = load_contract(contract_path)
    with console.status(f"checking {data}"):
        report = check_data(data, contract)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False)
    for problem in report.problems:
        console.print(problem, highlight=False)
    if report.problems:
        count = len(report.problems)
        _error_exit(f"{data} does not match {contract_path}: {count} mismatch{'es' if count > 1 else ''}", 2)
    console.print(f"{data} matches {contract_path}: {report.rows:,} rows, {report.columns} columns", highlight=False)
