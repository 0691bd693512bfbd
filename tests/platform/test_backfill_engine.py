"""The feature engine behind one interface: DuckDB by default, Spark by one setting, a clear error
without it, and a third engine added as one class (here the per-event replay, pure Python)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from mlops.backfill import backfill_features, engine_for
from mlops.backfill.engines import DuckDBEngine, SparkEngine
from mlops.backfill.interface import ENGINES, FeatureEngine, Scored, register_engine
from mlops.contract import DataContract, FeatureViewSpec
from mlops.data.generator import generate_transactions
from mlops.errors import ConfigError
from mlops.feature_replay import replay_features
from mlops.histories import History
from mlops.inference import OnnxModel
from mlops.settings import Settings

pytestmark = pytest.mark.unit


class ReplayEngine(FeatureEngine):
    """A toy third engine: the backfill by replaying rows through in-memory histories (pandas and
    Python); the latest state and scoring are the embedded engine's."""

    name = "replay"

    def backfill(self, source: Path, out: Path, contract: DataContract) -> None:
        frame = pd.read_parquet(source)
        pd.concat([frame, replay_features(frame, contract)], axis=1).to_parquet(out, index=False)

    def latest_histories(self, offline: Path, contract: DataContract, view: FeatureViewSpec, end: datetime,
                         start: datetime | None, *, batch: int) -> Iterator[list[tuple[str, History]]]:
        return DuckDBEngine(self.settings).latest_histories(offline, contract, view, end, start, batch=batch)

    def score(self, features: Path, model: OnnxModel, work: Path, contract: DataContract) -> Scored:
        return DuckDBEngine(self.settings).score(features, model, work, contract)


@pytest.fixture
def replay_registered() -> Iterator[None]:
    register_engine(ReplayEngine)
    yield
    del ENGINES[ReplayEngine.name]


@pytest.fixture
def raw(tmp_path: Path) -> Path:
    generate_transactions(300, seed=8).to_parquet(tmp_path / "raw.parquet", index=False)
    return tmp_path / "raw.parquet"


def _features(path: Path, contract: DataContract) -> pd.DataFrame:
    return pd.read_parquet(path).set_index(contract.id_column).sort_index()[contract.feature_names]


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


def test_the_settings_choose_the_engine_by_its_registered_name(tmp_path: Path) -> None:
    assert type(engine_for(Settings(home=tmp_path))) is DuckDBEngine
    assert type(engine_for(Settings(home=tmp_path, feature_engine="spark"))) is SparkEngine
    with pytest.raises(ConfigError, match=r"unknown feature engine 'polars'; registered: duckdb, spark"):
        engine_for(Settings(home=tmp_path, feature_engine="polars"))


def test_a_third_engine_is_one_class_and_the_backfill_runs_through_it(
        contract: DataContract, raw: Path, tmp_path: Path, replay_registered: None) -> None:
    summary = backfill_features(raw, tmp_path / "replay.parquet", contract,
                                Settings(home=tmp_path, feature_engine="replay"))
    assert (summary.engine, summary.rows) == ("replay", 300)
    backfill_features(raw, tmp_path / "duckdb.parquet", contract, Settings(home=tmp_path))
    replayed = _features(tmp_path / "replay.parquet", contract)
    embedded = _features(tmp_path / "duckdb.parquet", contract)
    assert replayed.index.equals(embedded.index)
    np.testing.assert_allclose(replayed.to_numpy(), embedded.to_numpy(), rtol=0, atol=1e-9)


def test_a_name_is_registered_once(replay_registered: None) -> None:
    clash = type("OtherReplay", (ReplayEngine,), {})
    with pytest.raises(ConfigError, match="a feature engine named 'replay' is registered already"):
        register_engine(clash)
    assert ENGINES["replay"] is ReplayEngine


def test_duckdbs_memory_limit_comes_from_the_settings_when_the_job_runs(
        contract: DataContract, raw: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Set after import (a profile, a params file or the environment of this run), it still bounds the job."""
    monkeypatch.setenv("MLOPS_DUCKDB_MEMORY_LIMIT", "a lot")
    with pytest.raises(duckdb.Error, match="Memory must have a number"):
        backfill_features(raw, tmp_path / "out.parquet", contract, Settings(home=tmp_path))


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is not None, reason="pyspark is installed here")
def test_the_spark_engine_without_pyspark_says_how_to_install_it(contract: DataContract, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_FEATURE_ENGINE", "spark")
    generate_transactions(100, seed=8).to_parquet(tmp_path / "raw.parquet", index=False)
    with pytest.raises(ConfigError, match=r"the spark engine needs the `spark` extra: pip install"):
        backfill_features(tmp_path / "raw.parquet", tmp_path / "out.parquet", contract, Settings(home=tmp_path))
    assert not (tmp_path / "out.parquet").exists()
