"""`mlops contract draft DATA --out FILE` and `mlops contract check DATA CONTRACT`: a user's own file gets a
contract that loads and that the file passes (exit 0); planted problems are one line each and exit 2;
bad arguments are one line, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops.contract import load_contract
from mlops.data.generator import write_transactions
from mlops_cli.app import app

pytestmark = pytest.mark.unit

runner = CliRunner()


def own_data(path: Path, rows: int = 2000) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    frame = pd.DataFrame({
        "TRANSACTION_ID": np.arange(rows),
        "TX_DATETIME": pd.Timestamp("2026-02-01") + pd.to_timedelta(np.sort(rng.integers(0, 9 * 86_400, rows)),
                                                                    unit="s"),
        "CUSTOMER_ID": rng.integers(0, 80, rows),
        "TERMINAL_ID": rng.integers(0, 30, rows),
        "TX_AMOUNT": np.round(rng.gamma(2, 40, rows), 2),
        "TX_FRAUD": (rng.random(rows) < 0.05).astype(int),
    })
    frame.to_csv(path, index=False)
    return frame


def one_line(output: str) -> str:
    return " ".join(output.split())


def test_draft_then_check_of_an_own_csv_passes(tmp_path: Path, cli_home: Path) -> None:
    data, out = tmp_path / "mine.csv", tmp_path / "contracts" / "mine.yaml"
    own_data(data)

    drafted = runner.invoke(app, ["contract", "draft", str(data), "--out", str(out)])

    assert drafted.exit_code == 0, drafted.output
    assert "id TRANSACTION_ID, timestamp TX_DATETIME, label TX_FRAUD, entities CUSTOMER_ID, TERMINAL_ID" in \
        one_line(drafted.output)
    contract = load_contract(out)
    assert contract.column("CUSTOMER_ID").dtype == "int"
    checked = runner.invoke(app, ["contract", "check", str(data), str(out)])
    assert checked.exit_code == 0, checked.output
    assert one_line(checked.output) == f"{data} matches {out}: 2,000 rows, 6 columns"


def test_check_of_the_generators_parquet_against_its_draft_passes(tmp_path: Path, cli_home: Path) -> None:
    data, out = tmp_path / "generated.parquet", tmp_path / "generated.yaml"
    write_transactions(data, 3000, seed=11)

    assert runner.invoke(app, ["contract", "draft", str(data), "--out", str(out)]).exit_code == 0
    checked = runner.invoke(app, ["contract", "check", str(data), str(out)])

    assert checked.exit_code == 0, checked.output
    assert "matches" in checked.output


def test_check_lists_each_mismatch_on_its_own_line_and_exits_2(tmp_path: Path, cli_home: Path) -> None:
    data, out = tmp_path / "mine.csv", tmp_path / "mine.yaml"
    frame = own_data(data)
    assert runner.invoke(app, ["contract", "draft", str(data), "--out", str(out)]).exit_code == 0
    bad = frame.drop(columns=["TERMINAL_ID"])
    bad.loc[:4, "TX_AMOUNT"] = -5.0
    bad.loc[7, "TX_AMOUNT"] = None
    bad.loc[9, "TRANSACTION_ID"] = 8
    broken = tmp_path / "broken.csv"
    bad.to_csv(broken, index=False)

    result = runner.invoke(app, ["contract", "check", str(broken), str(out)])

    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines[0] == "missing column TERMINAL_ID"
    assert lines[1].startswith("column TRANSACTION_ID: 1 repeated values in a unique column")
    assert lines[2] == "column TX_AMOUNT: 1 nulls, and the contract says it is not nullable"
    assert lines[3].startswith("column TX_AMOUNT: 5 values outside [0, ")
    assert one_line("\n".join(lines[4:])) == f"error: {broken} does not match {out}: 4 mismatches"
    assert "Traceback" not in result.output


def test_an_unknown_category_over_the_tolerance_fails_the_check(tmp_path: Path, cli_home: Path) -> None:
    data, out = tmp_path / "generated.parquet", tmp_path / "generated.yaml"
    write_transactions(data, 2000, seed=2)
    assert runner.invoke(app, ["contract", "draft", str(data), "--out", str(out)]).exit_code == 0
    frame = pd.read_parquet(data)
    frame.loc[:9, "country"] = "ZZ"  # 10 of 2000 rows: 0.5%, above 0.1%
    frame.to_parquet(data, index=False)

    result = runner.invoke(app, ["contract", "check", str(data), str(out)])

    assert result.exit_code == 2
    assert "column country: 10 values (0.50%) are not among its categories, above the tolerance 0.001 (e.g. 'ZZ')" \
        in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["contract", "draft", "{tmp}/nothing.csv", "--out", "{tmp}/c.yaml"],
     "error: data file not found: {tmp}/nothing.csv"),
    (["contract", "draft", "{tmp}/mine.xlsx", "--out", "{tmp}/c.yaml"], "error: DATA must be a CSV or Parquet file"),
    (["contract", "draft", "{tmp}/mine.csv", "--out", "{tmp}/c.txt"], "error: --out must end in .yaml or .yml"),
    (["contract", "draft", "{tmp}/mine.csv", "--out", "{tmp}/mine.csv.yaml"],
     "error: {tmp}/mine.csv.yaml exists (an edited contract?); pass --force to overwrite it"),
    (["contract", "draft", "{tmp}/mine.csv", "--out", "{tmp}/c.yaml", "--label", "TX_AMOUNT"],
     "error: label column 'TX_AMOUNT' must hold 0/1 (or true/false) values"),
    (["contract", "check", "{tmp}/mine.csv", "{tmp}/none.yaml"], "error: contract file not found: {tmp}/none.yaml"),
    (["contract", "check", "{tmp}/mine.csv", "{tmp}/mine.csv.yaml"],
     "error: contract file {tmp}/mine.csv.yaml is invalid"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path: Path, cli_home: Path, args: list[str], message: str) -> None:
    own_data(tmp_path / "mine.csv", rows=300)
    (tmp_path / "mine.csv.yaml").write_text("name: x\n")

    result = runner.invoke(app, [a.format(tmp=tmp_path) for a in args])

    assert result.exit_code == 2, result.output
    assert one_line(result.output).startswith(message.format(tmp=tmp_path))
    assert "Traceback" not in result.output
    assert not (tmp_path / "c.yaml").exists()
