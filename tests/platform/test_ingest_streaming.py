"""Ingest in chunks: the snapshot equals one read of the whole file, and the header is checked first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mlops.contract import DataContract
from mlops.data import ingest as ingest_module
from mlops.data.generator import generate_transactions
from mlops.data.ingest import ingest
from mlops.errors import IngestError
from mlops_cli.app import app

CHUNK = 7  # rows per chunk in these tests: every file below spans several chunks


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    frame: pd.DataFrame = generate_transactions(120, seed=5)
    return frame


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", CHUNK)


def _whole_file_read(source: Path, tmp_path: Path, contract: DataContract, monkeypatch: pytest.MonkeyPatch
                     ) -> pd.DataFrame:
    """The snapshot of ``source`` with the whole file in one chunk."""
    with monkeypatch.context() as patch:
        patch.setattr(ingest_module, "CHUNK_ROWS", 1 << 30)
        return pd.read_parquet(ingest(str(source), tmp_path / "one-chunk", contract).path)


@pytest.mark.unit
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(1, 60), fmt=st.sampled_from(["csv", "parquet", "csv.gz"]), whole_from=st.integers(0, 60))
def test_a_snapshot_in_chunks_equals_the_whole_file_read_at_once(
    tmp_path_factory: pytest.TempPathFactory, frame: pd.DataFrame, contract: DataContract,
    monkeypatch: pytest.MonkeyPatch, rows: int, fmt: str, whole_from: int,
) -> None:
    tmp_path = tmp_path_factory.mktemp("chunks")
    data = frame.head(rows).copy()
    data.loc[data.index[whole_from:], "amount"] = data["amount"].iloc[whole_from:].round(0)  # ints after floats
    source = tmp_path / f"tx.{fmt}"
    if fmt == "parquet":
        data.to_parquet(source, index=False, row_group_size=5)
    else:
        data.to_csv(source, index=False)
    with monkeypatch.context() as patch:
        patch.setattr(ingest_module, "CHUNK_ROWS", CHUNK)
        snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    chunked = pd.read_parquet(snapshot.path)
    assert snapshot.rows == rows
    pd.testing.assert_frame_equal(chunked, _whole_file_read(source, tmp_path, contract, monkeypatch))
    if fmt == "parquet":
        pd.testing.assert_frame_equal(chunked, data.reset_index(drop=True))
    assert pq.ParquetFile(snapshot.path).metadata.num_row_groups == -(-rows // CHUNK)


@pytest.mark.unit
@pytest.mark.usefixtures("small_chunks")
def test_a_column_whose_type_changes_between_chunks_takes_the_wider_type(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract
) -> None:
    data = frame.head(30).copy()
    data["amount"] = [float(i) for i in range(29)] + [2.5]  # whole numbers until the last chunk
    data["merchant_id"] = [f"{i:03d}" for i in range(29)] + ["M7"]  # digits until the last chunk
    source = tmp_path / "tx.csv"
    data.to_csv(source, index=False)
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    stored = pd.read_parquet(snapshot.path)
    assert snapshot.rows == len(stored) == 30  # rows of every chunk, counted once
    assert stored["amount"].dtype == "float64"
    assert stored["amount"].tolist() == data["amount"].tolist()
    assert stored["merchant_id"].tolist() == data["merchant_id"].tolist()  # text as written, "007" stays "007"


@pytest.mark.unit
@pytest.mark.usefixtures("small_chunks")
def test_a_label_spelling_the_contract_does_not_list_keeps_every_chunk_as_written(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract
) -> None:
    data = frame.head(20).assign(is_fraud=["false"] * 19 + ["maybe"])
    source = tmp_path / "tx.csv"
    data.to_csv(source, index=False)
    stored = pd.read_parquet(ingest(str(source), tmp_path / "snapshots", contract).path)
    assert stored["is_fraud"].tolist() == data["is_fraud"].tolist()  # validation's int type check names it


@pytest.mark.unit
@pytest.mark.usefixtures("small_chunks")
def test_times_mixing_offsets_in_different_chunks_are_refused_with_whole_file_counts(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract
) -> None:
    text = frame.head(20).to_csv(index=False).splitlines()
    text[-3:] = [line.replace("+00:00", "") for line in text[-3:]]  # the last chunk lost its offsets
    source = tmp_path / "tx.csv"
    source.write_text("\n".join(text) + "\n")
    with pytest.raises(IngestError) as info:
        ingest(str(source), tmp_path / "snapshots", contract)
    assert "(17 rows, e.g." in info.value.message
    assert "times without one (3 rows, e.g." in info.value.message
    assert not list((tmp_path / "snapshots").glob("*/meta.json"))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("rename", "message"),
    [({"amount": "amt"}, "lacks the column amount (found 'amt': rename it) of contract 'card-transactions'"),
     ({"amount": "Amount", "country": "cntry"},
      "lacks the columns amount (found 'Amount': rename it), country (found 'cntry': rename it)")],
    ids=["one-misnamed", "two-misnamed"],
)
def test_a_missing_contract_column_stops_ingest_naming_it(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract, rename: dict[str, str], message: str
) -> None:
    source = tmp_path / "tx.parquet"
    frame.rename(columns=rename).to_parquet(source, index=False)
    with pytest.raises(IngestError) as info:
        ingest(str(source), tmp_path / "snapshots", contract)
    assert message in info.value.message
    assert info.value.field == next(iter(rename))
    assert not (tmp_path / "snapshots").exists()  # nothing is written for a source that breaks the contract


@pytest.mark.unit
def test_a_dropped_column_is_named_without_a_lookalike(tmp_path: Path, frame: pd.DataFrame,
                                                        contract: DataContract) -> None:
    source = tmp_path / "tx.csv"
    frame.drop(columns=["amount"]).to_csv(source, index=False)
    with pytest.raises(IngestError) as info:
        ingest(str(source), tmp_path / "snapshots", contract)
    assert f"{source} lacks the column amount of contract 'card-transactions'; its columns are" in info.value.message


@pytest.mark.integration
def test_the_ingest_command_names_the_missing_column_in_one_line_and_exits_2(
    tmp_path: Path, frame: pd.DataFrame
) -> None:
    source = tmp_path / "tx.csv"
    frame.drop(columns=["amount"]).to_csv(source, index=False)
    env = {**os.environ, "MLOPS_HOME": str(tmp_path / "home"), "COLUMNS": "400"}
    done = subprocess.run([sys.executable, "-m", "mlops_cli", "data", "ingest", str(source)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ")
    assert "lacks the column amount" in lines[0]


@pytest.mark.unit
def test_the_pipeline_stops_at_the_header_check_before_any_step(
    tmp_path: Path, frame: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    source = tmp_path / "tx.csv"
    frame.rename(columns={"country": "Country"}).to_csv(source, index=False)
    result = CliRunner().invoke(app, ["pipeline", "run", str(source), "--runner", "inline"])
    assert result.exit_code == 2
    assert "lacks the column country (found 'Country': rename it)" in " ".join(result.output.split())
    assert not (tmp_path / "home" / "snapshots").exists()
