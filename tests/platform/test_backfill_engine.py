"""The backfill's engine choice: DuckDB by default, Spark by one setting, a clear error without it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from mlops.backfill import backfill_features
from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.errors import ConfigError
from mlops.settings import Settings


def test_the_default_engine_writes_one_row_per_input_row(contract: DataContract, tmp_path: Path) -> None:
    frame = generate_transactions(300, seed=8)
    folder = tmp_path / "raw"
    folder.mkdir()
    frame.iloc[:120].to_parquet(folder / "a.parquet", index=False)  # a folder of files reads as one table
    frame.iloc[120:].to_parquet(folder / "b.parquet", index=False)
    summary = backfill_features(folder, tmp_path / "out.parquet", contract, Settings(home=tmp_path))
    assert (summary.engine, summary.rows) == ("duckdb", 300)
    written = pd.read_parquet(tmp_path / "out.parquet")
    assert sorted(written["transaction_id"]) == sorted(frame["transaction_id"])


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is not None, reason="pyspark is installed here")
def test_the_spark_engine_without_pyspark_says_how_to_install_it(contract: DataContract, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_FEATURE_ENGINE", "spark")
    generate_transactions(100, seed=8).to_parquet(tmp_path / "raw.parquet", index=False)
    with pytest.raises(ConfigError, match=r"the spark engine needs the `spark` extra: pip install"):
        backfill_features(tmp_path / "raw.parquet", tmp_path / "out.parquet", contract, Settings(home=tmp_path))
    assert not (tmp_path / "out.parquet").exists()
