"""benchmarks/model_families.py's data options: ``--hot COLUMN=SHARE`` moves that share of the rows onto
one value of the column (a merchant holding 30 % of the card payments) and leaves every other cell as
it was; a malformed option, or a column an example lacks, is one line and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.model_families import _concentrate, _hot_option, main

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("ids", [[f"M{i % 50}" for i in range(20_000)], [i % 50 for i in range(20_000)]],
                         ids=["string ids", "integer ids"])
def test_the_hot_share_of_rows_moves_onto_one_new_value_and_nothing_else_changes(
        tmp_path: Path, ids: list[object]) -> None:
    path = tmp_path / "raw.parquet"
    before = pd.DataFrame({"merchant_id": ids, "amount": np.arange(len(ids), dtype=float)})
    before.to_parquet(path, index=False)
    _concentrate(path, "merchant_id", 0.3, seed=5)
    after = pd.read_parquet(path)
    moved = after["merchant_id"] != before["merchant_id"]
    assert after["merchant_id"][moved].nunique() == 1
    [hot] = after["merchant_id"][moved].unique()
    assert hot not in set(before["merchant_id"])  # a merchant of its own, not one that already had rows
    assert abs(moved.mean() - 0.3) < 0.015
    assert after["merchant_id"].dtype == before["merchant_id"].dtype
    pd.testing.assert_series_equal(after["amount"], before["amount"])


def test_the_option_reads_column_and_share() -> None:
    assert _hot_option("merchant_id=0.3") == ("merchant_id", 0.3)


@pytest.mark.parametrize("text", ["merchant_id", "merchant_id=", "=0.3", "merchant_id=1.5", "merchant_id=x"])
def test_a_malformed_option_is_refused(text: str) -> None:
    with pytest.raises(Exception, match="COLUMN=SHARE"):
        _hot_option(text)


def test_a_column_an_example_lacks_is_one_line_and_exit_code_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["model_families.py", "--hot", "merchant_id=0.3",
                                      "--examples", "terminal-payments"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith("--hot: terminal-payments has no column 'merchant_id'")
