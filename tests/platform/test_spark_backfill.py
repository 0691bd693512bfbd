"""The Spark backfill gives every row the features the per-event replay gives it; Spark scoring is ONNX Runtime's.

Spark runs in local mode (one session for the whole test run). The reference is
:func:`mlops.features.replay_features`, what the online store with write-through answers.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from benchmarks.spark_backfill import seeded_model_onnx, with_hot_merchant
from mlops.backfill import backfill_features
from mlops.backfill.engines import DuckDBEngine
from mlops.backfill.interface import PROBABILITY
from mlops.backfill.spark_engine import backfill_frame, backfill_spark, score_spark
from mlops.backfill.spark_job import main as spark_job
from mlops.contract import DataContract, load_contract
from mlops.contracts import CONTRACTS_DIR
from mlops.data.generator import generate_transactions
from mlops.data.terminal_generator import generate_payments
from mlops.errors import InputError
from mlops.feature_replay import replay_features
from mlops.inference import OnnxModel
from mlops.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

BASE = datetime(2026, 3, 1, 22, 0, tzinfo=UTC)
DUCKDB = DuckDBEngine(Settings())
_MICRO = timedelta(microseconds=1)
_EDGES = [timedelta(hours=1), timedelta(hours=24), timedelta(days=7), timedelta(days=30)]
# Half-hour and whole-day steps make same-instant ties and land on every window's edge; the edges
# one microsecond either side, and any microsecond of forty days (the time features), complete it.
_OFFSETS = st.one_of(
    st.integers(0, 48).map(lambda n: timedelta(minutes=30 * n)),
    st.integers(0, 40).map(lambda n: timedelta(days=n)),
    st.sampled_from([edge + step for edge in _EDGES for step in (-_MICRO, _MICRO)]),
    st.integers(0, 40 * 86_400 * 10**6).map(lambda us: timedelta(microseconds=us)),
)
_EVENT = st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]), _OFFSETS,
                   st.integers(1, 5_000_000).map(lambda cents: cents / 100))
# Many independent streams per example (entities prefixed by the stream): one Spark job (seconds) checks them all.
_STREAMS = st.lists(st.lists(_EVENT, min_size=1, max_size=20), min_size=10, max_size=40)


def streams_frame(streams: list[list[tuple[str, str, timedelta, float]]]) -> pd.DataFrame:
    rows = [{"transaction_id": f"S{s}T{i:03d}", "customer_id": f"S{s}{c}", "merchant_id": f"S{s}{m}",
             "event_timestamp": BASE + offset, "amount": amount}
            for s, events in enumerate(streams) for i, (c, m, offset, amount) in enumerate(events)]
    return pd.DataFrame(rows)


def max_feature_difference(got: pd.DataFrame, frame: pd.DataFrame, contract: DataContract) -> float:
    """Largest absolute difference from the replay over every feature, rows matched by transaction id."""
    assert sorted(got["transaction_id"]) == sorted(frame["transaction_id"])
    expected = replay_features(frame, contract).set_index(frame["transaction_id"])
    aligned = got.set_index("transaction_id").loc[expected.index, contract.feature_names]
    return float(np.abs(aligned.to_numpy(dtype="float64") - expected.to_numpy(dtype="float64")).max())


@hypothesis_settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams=_STREAMS)
def test_spark_features_equal_the_replay_on_streams_with_ties_and_edges(
    spark: SparkSession, contract: DataContract, streams: list[list[tuple[str, str, timedelta, float]]],
) -> None:
    frame = streams_frame(streams)
    got = backfill_frame(spark.createDataFrame(frame), contract).toPandas()
    assert max_feature_difference(got, frame, contract) <= 1e-9


_LABELLED_STREAMS = st.lists(st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]),
                                                _OFFSETS, st.integers(1, 5_000_000).map(lambda cents: cents / 100),
                                                st.integers(0, 1)),
                                      min_size=1, max_size=20), min_size=10, max_size=30)
# A label count and rate per view; half-hour steps and the 7-day and 30-day edges land on their frames' ends.
_LABEL_FEATURES = {
    "customer": [{"name": "customer_fraud_count_1d", "agg": "label_count", "window": "1d", "delay": "1h"},
                 {"name": "customer_fraud_rate_1h", "agg": "label_rate", "window": "1h", "delay": "30m"}],
    "merchant": [{"name": "merchant_fraud_rate_23d", "agg": "label_rate", "window": "23d", "delay": "7d"}],
}


def with_label_features(contract: DataContract) -> DataContract:
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += _LABEL_FEATURES[view["entity"]]
    return DataContract.model_validate(raw)


@hypothesis_settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams=_LABELLED_STREAMS)
def test_spark_label_features_equal_duckdb_on_streams_with_ties_and_edges(
    spark: SparkSession, contract: DataContract, tmp_path_factory: pytest.TempPathFactory,
    streams: list[list[tuple[str, str, timedelta, float, int]]],
) -> None:
    """Label counts and rates over [t - delay - window, t - delay): Spark equals DuckDB and the replay."""
    labelled = with_label_features(contract)
    frame = streams_frame([[e[:4] for e in events] for events in streams])
    frame["is_fraud"] = [e[4] for events in streams for e in events]
    got = backfill_frame(spark.createDataFrame(frame), labelled).toPandas()
    assert max_feature_difference(got, frame, labelled) <= 1e-9
    folder = tmp_path_factory.mktemp("spark-labels")
    frame.to_parquet(folder / "raw.parquet", index=False)
    DUCKDB.backfill(folder / "raw.parquet", folder / "duckdb.parquet", labelled)
    duck = pd.read_parquet(folder / "duckdb.parquet").set_index("transaction_id").loc[got["transaction_id"]]
    difference = np.abs(got[labelled.feature_names].to_numpy() - duck[labelled.feature_names].to_numpy())
    assert float(difference.max()) <= 1e-9


@pytest.fixture(scope="module")
def hot_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    """Generated transactions, 30 % of them at one merchant, as a Parquet file written by pandas."""
    frame = with_hot_merchant(generate_transactions(2000, seed=11), share=0.3, seed=11)
    path = tmp_path_factory.mktemp("spark-source") / "transactions.parquet"
    frame.to_parquet(path, index=False)
    return frame, path


@pytest.fixture(scope="module")
def hot_features(spark: SparkSession, contract: DataContract, hot_source: tuple[pd.DataFrame, Path],
                 tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spark-features") / "features"
    backfill_spark(hot_source[1], out, contract)
    return out


def test_backfill_of_a_hot_merchant_file_equals_the_replay(
    hot_source: tuple[pd.DataFrame, Path], hot_features: Path, contract: DataContract,
) -> None:
    frame, _ = hot_source
    got = pd.read_parquet(hot_features)
    assert max_feature_difference(got, frame, contract) <= 1e-9


def test_backfill_keeps_every_input_column_and_adds_float_features(
    hot_source: tuple[pd.DataFrame, Path], hot_features: Path, contract: DataContract,
) -> None:
    frame, _ = hot_source
    got = pd.read_parquet(hot_features)
    assert list(got.columns) == [*frame.columns, *contract.feature_names]
    assert all(got[name].dtype == np.float64 for name in contract.feature_names)
    got = got.set_index("transaction_id").loc[frame["transaction_id"]]
    for column in frame.columns.drop("transaction_id"):  # pandas' nanosecond timestamps come back equal
        assert got[column].tolist() == frame[column].tolist(), column


@pytest.fixture(scope="module")
def model_onnx(contract: DataContract, hot_features: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """An exported (untrained, seeded) model whose scaler saw the hot-merchant features."""
    path = tmp_path_factory.mktemp("spark-model") / "model.onnx"
    return seeded_model_onnx(pd.read_parquet(hot_features), contract, path)


def test_spark_scoring_equals_onnx_runtime_in_process(
    hot_features: Path, model_onnx: bytes, contract: DataContract, tmp_path: Path,
) -> None:
    score_spark(hot_features, model_onnx, tmp_path / "scored", contract)
    scored = pd.read_parquet(tmp_path / "scored")
    features = pd.read_parquet(hot_features)
    model_path = tmp_path / "model.onnx"
    model_path.write_bytes(model_onnx)
    expected = pd.Series(OnnxModel(model_path).predict_proba(features), index=features["transaction_id"])
    assert list(scored.columns) == [*features.columns, PROBABILITY]
    assert scored[PROBABILITY].dtype == np.float64
    got = scored.set_index("transaction_id")[PROBABILITY].loc[expected.index]
    assert float((got - expected.astype("float64")).abs().max()) <= 1e-6
    assert got.nunique() > 100  # the rows are scored one by one, not given one value


def test_missing_column_is_an_input_error_naming_it(
    spark: SparkSession, contract: DataContract, hot_source: tuple[pd.DataFrame, Path], tmp_path: Path,
) -> None:
    source = tmp_path / "no-amount.parquet"
    hot_source[0].drop(columns="amount").to_parquet(source)
    with pytest.raises(InputError, match="amount") as raised:
        backfill_spark(source, tmp_path / "out", contract)
    assert raised.value.field == "amount"
    assert not (tmp_path / "out").exists()


def test_output_over_the_input_is_refused_and_the_input_kept(
    spark: SparkSession, contract: DataContract, hot_source: tuple[pd.DataFrame, Path],
) -> None:
    with pytest.raises(InputError, match="overlaps"):
        backfill_spark(hot_source[1], hot_source[1], contract)
    assert len(pd.read_parquet(hot_source[1])) == len(hot_source[0])


def test_a_file_that_is_not_a_model_is_an_input_error(
    spark: SparkSession, contract: DataContract, hot_features: Path, tmp_path: Path,
) -> None:
    with pytest.raises(InputError, match="not a loadable ONNX graph"):
        score_spark(hot_features, b"not a graph", tmp_path / "scored", contract)


def test_spark_job_reports_a_missing_source_in_one_line_with_exit_code_2(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    assert spark_job(["backfill", str(tmp_path / "absent.parquet"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "absent.parquet does not exist" in err


def test_spark_job_backfills_then_scores(
    spark: SparkSession, hot_source: tuple[pd.DataFrame, Path], model_onnx: bytes, contract: DataContract,
    tmp_path: Path,
) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(model_onnx)
    assert spark_job(["backfill", str(hot_source[1]), str(tmp_path / "features")]) == 0
    assert spark_job(["score", str(tmp_path / "features"), str(model), str(tmp_path / "scored")]) == 0
    scored = pd.read_parquet(tmp_path / "scored")
    assert max_feature_difference(scored, hot_source[0], contract) <= 1e-9
    assert scored[PROBABILITY].between(0, 1).all()


@pytest.mark.parametrize("engine", ["duckdb", "spark"])
def test_the_engine_setting_gives_one_file_equal_to_the_spark_backfill(
    engine: str, spark: SparkSession, hot_source: tuple[pd.DataFrame, Path], hot_features: Path,
    contract: DataContract, tmp_path: Path,
) -> None:
    """MLOPS_FEATURE_ENGINE picks the engine; either writes one Parquet file, and the two agree to 1e-9."""
    out = tmp_path / "features.parquet"
    summary = backfill_features(hot_source[1], out, contract, Settings(home=tmp_path, feature_engine=engine))
    assert out.is_file()
    assert (summary.engine, summary.rows) == (engine, len(hot_source[0]))
    got = pd.read_parquet(out).set_index("transaction_id").sort_index()
    reference = pd.read_parquet(hot_features).set_index("transaction_id").loc[got.index]
    np.testing.assert_allclose(got[contract.feature_names].to_numpy(float),
                               reference[contract.feature_names].to_numpy(float), rtol=0, atol=1e-9)


# A ratio to the mean and a z-score per view; amounts repeat often (equal values: a z-score of 0).
_CURRENT_VALUE_FEATURES = {
    "customer": [{"name": "customer_amount_ratio_24h", "agg": "ratio_to_mean", "column": "amount", "window": "24h"},
                 {"name": "customer_amount_zscore_7d", "agg": "zscore", "column": "amount", "window": "7d"}],
    "merchant": [{"name": "merchant_amount_zscore_1h", "agg": "zscore", "column": "amount", "window": "1h"}],
}
_REPEATING_STREAMS = st.lists(st.lists(st.tuples(
    st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]), _OFFSETS,
    st.one_of(st.sampled_from([0.5, 2.5, 40.0]), st.integers(1, 500_000).map(lambda cents: cents / 100))),
    min_size=1, max_size=20), min_size=10, max_size=30)


@hypothesis_settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams=_REPEATING_STREAMS)
def test_spark_current_value_features_equal_duckdb_on_streams_with_ties_and_edges(
    spark: SparkSession, contract: DataContract, tmp_path_factory: pytest.TempPathFactory,
    streams: list[list[tuple[str, str, timedelta, float]]],
) -> None:
    """ratio_to_mean and zscore of the row's own amount: Spark equals DuckDB and the replay."""
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += _CURRENT_VALUE_FEATURES[view["entity"]]
    scored = DataContract.model_validate(raw)
    frame = streams_frame(streams)
    got = backfill_frame(spark.createDataFrame(frame), scored).toPandas().set_index("transaction_id")
    folder = tmp_path_factory.mktemp("spark-current")
    frame.to_parquet(folder / "raw.parquet", index=False)
    DUCKDB.backfill(folder / "raw.parquet", folder / "duckdb.parquet", scored)
    duck = pd.read_parquet(folder / "duckdb.parquet").set_index("transaction_id").loc[got.index]
    replay = replay_features(frame, scored).set_axis(frame["transaction_id"]).loc[got.index]
    scores = np.array(["ratio" in n or "zscore" in n for n in scored.feature_names])
    for reference in (duck, replay):  # to 1e-9; a ratio or z-score (unbounded) of its size above 1
        expected = reference[scored.feature_names].to_numpy(dtype="float64")
        difference = np.abs(got[scored.feature_names].to_numpy(dtype="float64") - expected)
        assert float((difference / np.where(scores, np.maximum(np.abs(expected), 1.0), 1.0)).max()) <= 1e-9


# Novelty and variety: distinct merchants of a card, the card meeting the merchant (seen, gap) and
# the merchant's side, over few entities so pairs repeat; the integer-key form is the DuckDB tests'.
_TEXT_FEATURES = {
    "customer": [{"name": "customer_merchants_24h", "agg": "distinct_count", "column": "merchant_id", "window": "24h"},
                 {"name": "customer_met_merchant_7d", "agg": "pair_seen", "column": "merchant_id", "window": "7d"},
                 {"name": "customer_merchant_gap_1h", "agg": "pair_seconds_since_previous", "column": "merchant_id",
                  "window": "1h"}],
    "merchant": [{"name": "merchant_customer_gap_7d", "agg": "pair_seconds_since_previous", "column": "customer_id",
                  "window": "7d"},
                 {"name": "merchant_channels_1h", "agg": "distinct_count", "column": "channel", "window": "1h"},
                 {"name": "merchant_met_channel_24h", "agg": "pair_seen", "column": "channel", "window": "24h"},
                 {"name": "merchant_channel_gap_24h", "agg": "pair_seconds_since_previous", "column": "channel",
                  "window": "24h"}],
}


@hypothesis_settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(streams=_STREAMS)
def test_spark_novelty_and_variety_equal_duckdb_on_streams_with_ties_and_edges(
    spark: SparkSession, contract: DataContract, tmp_path_factory: pytest.TempPathFactory,
    streams: list[list[tuple[str, str, timedelta, float]]],
) -> None:
    """distinct_count, pair_seen, pair_seconds_since_previous: Spark equals DuckDB and the replay."""
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += _TEXT_FEATURES[view["entity"]]
    paired = DataContract.model_validate(raw)
    frame = streams_frame(streams)
    frame["channel"] = [["pos", "online", None][i % 3] for i in range(len(frame))]  # a missing one never meets
    got = backfill_frame(spark.createDataFrame(frame), paired).toPandas()
    assert max_feature_difference(got, frame, paired) <= 1e-9
    folder = tmp_path_factory.mktemp("spark-texts")
    frame.to_parquet(folder / "raw.parquet", index=False)
    DUCKDB.backfill(folder / "raw.parquet", folder / "duckdb.parquet", paired)
    duck = pd.read_parquet(folder / "duckdb.parquet").set_index("transaction_id").loc[got["transaction_id"]]
    difference = np.abs(got[paired.feature_names].to_numpy() - duck[paired.feature_names].to_numpy())
    assert float(difference.max()) <= 1e-9


def test_integer_ids_without_categories_backfill_and_score_on_spark_as_on_duckdb(
    spark: SparkSession, tmp_path: Path,
) -> None:
    """The terminal-payments example (integer ids, upper-case columns, no categorical input, delayed
    label rates): Spark's features equal DuckDB's to 1e-9, its scores equal ONNX Runtime's, and the
    ids come back as integers."""
    contract = load_contract(CONTRACTS_DIR / "terminals.yaml")
    source = tmp_path / "payments.parquet"
    generate_payments(3000, contract, seed=5).to_parquet(source)
    written: dict[str, Path] = {}
    for engine in ("spark", "duckdb"):
        written[engine] = tmp_path / f"{engine}.parquet"
        backfill_features(source, written[engine], contract, Settings(home=tmp_path, feature_engine=engine))
    frames = {engine: pd.read_parquet(path).set_index(contract.id_column).sort_index()
              for engine, path in written.items()}
    assert pd.api.types.is_integer_dtype(frames["spark"].index)
    assert frames["spark"].index.equals(frames["duckdb"].index)
    np.testing.assert_allclose(frames["spark"][contract.feature_names].to_numpy(float),
                               frames["duckdb"][contract.feature_names].to_numpy(float), rtol=0, atol=1e-9)

    model = tmp_path / "model.onnx"
    seeded_model_onnx(frames["duckdb"].reset_index(), contract, model)
    score_spark(written["spark"], model.read_bytes(), tmp_path / "scored", contract)
    scored = pd.read_parquet(tmp_path / "scored").set_index(contract.id_column)
    assert pd.api.types.is_integer_dtype(scored.index)
    expected = pd.Series(OnnxModel(model).predict_proba(frames["duckdb"].reset_index()), index=frames["duckdb"].index)
    got = scored[PROBABILITY].loc[expected.index]
    assert float((got - expected.astype("float64")).abs().max()) <= 1e-6
    assert got.nunique() > 100


def test_payments_without_labels_backfill_on_spark_as_on_duckdb(spark: SparkSession, tmp_path: Path) -> None:
    """A file to score carries no label column: both engines read its labels as not delivered yet (the
    terminal example's label rates count none), as the service does, rather than refusing it."""
    contract = load_contract(CONTRACTS_DIR / "terminals.yaml")
    source = tmp_path / "payments.parquet"
    generate_payments(1000, contract, seed=5).drop(columns=[contract.label_column]).to_parquet(source)
    frames = {}
    for engine in ("spark", "duckdb"):
        out = tmp_path / f"{engine}.parquet"
        backfill_features(source, out, contract, Settings(home=tmp_path, feature_engine=engine))
        frames[engine] = pd.read_parquet(out).set_index(contract.id_column).sort_index()
    np.testing.assert_allclose(frames["spark"][contract.feature_names].to_numpy(float),
                               frames["duckdb"][contract.feature_names].to_numpy(float), rtol=0, atol=1e-9)
    label_features = [f.name for v in contract.feature_views for f in v.features if f.is_label]
    assert (frames["spark"][label_features] == 0.0).all().all()
    assert contract.label_column not in frames["spark"].columns  # the stand-in is not written
    assert list(frames["spark"].columns) == list(frames["duckdb"].columns)
