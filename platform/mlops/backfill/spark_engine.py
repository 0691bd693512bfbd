"""The feature backfill and batch scoring on Apache Spark, for data beyond one machine.

Same definitions as the per-event computation in :mod:`mlops.features`, derived from the contract:
every window feature is a Spark window over the entity's rows ordered by epoch microseconds, and
``rangeBetween(-window_us, -1)`` on those integers is exactly [t - window, t), so the current
transaction and every other of its instant are excluded whatever order ties arrive in.
``seconds_since_previous`` is the entity's latest earlier instant (unbounded preceding .. -1), capped
at its window. A label feature sums (and counts) the 0/1 label over
``rangeBetween(-(delay + window), -(delay + 1))``, exactly [t - delay - window, t - delay).
``ratio_to_mean`` and ``zscore`` compare the row's own value with the window's mean (and ``var_pop``).
``distinct_count`` is the size of the window's ``collect_set`` of the column's canonical text; the pair
features look at the newest earlier instant of a window partitioned by the entity and that text. The
time features repeat :func:`mlops.features.time_feature_values`'s floating-point
operations on the same microseconds.

Runs in the active SparkSession (``spark-submit`` configures it on a cluster) or starts a local one.
pyspark is the optional extra ``spark`` and needs Java 17 or newer.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mlops.backfill.interface import PROBABILITY
from mlops.contract import DataContract, FeatureSpec
from mlops.errors import ConfigError, InputError

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.window import WindowSpec

    from mlops.inference import OnnxModel

# A local path, or a URI Spark reads itself (s3a://, hdfs://, gs://), kept as text: Path would fold "//".
Location = Path | str
_MICROS = 1_000_000
_DAY_US = 86_400 * _MICROS
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0, as datetime.weekday counts)
_T_US = "__mlops_event_us"
# What the results depend on, set for the duration of a call: UTC for zone-less timestamps,
# microsecond Parquet timestamps on write (Spark's default is the deprecated INT96), and pandas'
# nanosecond Parquet timestamps read as longs (Spark refuses TIMESTAMP(NANOS) otherwise).
_SESSION_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.legacy.parquet.nanosAsLong": "true",
}


def spark_session() -> SparkSession:
    """The active session, or a new one (local on every core unless spark-submit says otherwise)."""
    try:
        from pyspark.errors import PySparkRuntimeError
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise ConfigError("the Spark engine needs pyspark: pip install 'mlops-platform[spark]'") from exc
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    try:
        # Python workers run this interpreter (pyspark would start `python3`, which may lack the project);
        # spark-submit sets PYSPARK_PYTHON itself (from --conf spark.pyspark.python).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        session = SparkSession.builder.appName("mlops").config("spark.ui.enabled", "false").getOrCreate()
    except PySparkRuntimeError as exc:  # no JVM: the launcher cannot start one
        raise ConfigError(f"Spark cannot start (it needs Java 17 or newer on PATH or JAVA_HOME): {exc}") from exc
    session.sparkContext.setLogLevel("ERROR")
    return session


def backfill_spark(source: Location, out: Location, contract: DataContract) -> None:
    """Write ``source``'s rows (Parquet file or folder) with every contract feature to ``out`` (Parquet folder)."""
    _refuse_overlap(source, out)
    spark = spark_session()
    with _session_conf(spark):
        frame = _read_parquet(spark, source, "the transactions")
        # To score: labels not delivered yet (a stand-in, not written), as DuckDB reads them.
        stand_in = contract.label_column not in frame.columns and contract.label_column in _raw_columns(contract)
        if stand_in:
            from pyspark.sql import functions as sf

            frame = frame.withColumn(contract.label_column, sf.lit(None).cast("double"))
        _require(frame, _raw_columns(contract), "the transactions")
        backfilled = backfill_frame(frame, contract)
        (backfilled.drop(contract.label_column) if stand_in else backfilled).write.mode("overwrite").parquet(str(out))


def score_spark(features: Location, model_onnx: bytes, out: Location, contract: DataContract) -> None:
    """Write ``features``' rows (a backfill's output) with the model's ``probability`` to ``out``."""
    _refuse_overlap(features, out)
    input_names = load_onnx(model_onnx).input_names  # a bad graph fails here, before any Spark work
    spark = spark_session()
    with _session_conf(spark):
        frame = _read_parquet(spark, features, "the features")
        _require(frame, contract.feature_names, "the features (run the backfill first)")
        _require(frame, input_names, "the features")
        score_frame(frame, model_onnx).write.mode("overwrite").parquet(str(out))


def backfill_frame(frame: DataFrame, contract: DataContract) -> DataFrame:
    """``frame`` plus one float64 column per contract feature (lazy: nothing runs until it is written)."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as st
    from pyspark.sql.window import Window

    ts = contract.timestamp_column
    nanos = isinstance(frame.schema[ts].dataType, st.LongType)
    with_micros = frame.withColumn(_T_US, _event_micros(frame, ts))
    columns: dict[str, Column] = {}
    for view in contract.feature_views:
        key = contract.entity(view.entity).join_key
        by_entity = Window.partitionBy(key).orderBy(_T_US)
        columns |= {feature.name: _text_feature(feature, key, by_entity, _text(contract, str(feature.column)))
                    if feature.uses_text else _window_feature(feature, by_entity, contract.label_column)
                    for feature in view.features}
    columns |= _time_features(contract.time_features)
    result = with_micros.withColumns(columns)
    if nanos:  # written back as a timestamp (microseconds, as every feature saw it)
        result = result.withColumn(ts, sf.timestamp_micros(sf.col(_T_US)))
    return result.drop(_T_US)


def score_frame(frame: DataFrame, model_onnx: bytes) -> DataFrame:
    """``frame`` plus ``probability``: ONNX Runtime per partition, the graph broadcast once to every executor."""
    from pyspark.sql import types as st

    graph = frame.sparkSession.sparkContext.broadcast(model_onnx)
    schema = st.StructType([*frame.schema.fields, st.StructField(PROBABILITY, st.DoubleType(), nullable=False)])

    def score(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        model = load_onnx(graph.value)
        for batch in batches:
            probabilities = model.predict_proba(batch) if len(batch) else np.empty(0, np.float32)
            yield batch.assign(**{PROBABILITY: probabilities.astype(np.float64)})

    return frame.mapInPandas(score, schema)


def load_onnx(model_onnx: bytes) -> OnnxModel:
    """The graph as the service loads it (same session options, same feed), from its bytes."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, InvalidGraph, InvalidProtobuf

    from mlops.inference import OnnxModel

    with tempfile.TemporaryDirectory(prefix="mlops-onnx-") as folder:
        path = Path(folder) / "model.onnx"
        path.write_bytes(model_onnx)
        try:
            return OnnxModel(path)  # the session holds the graph: the file can go
        except (Fail, InvalidArgument, InvalidGraph, InvalidProtobuf) as exc:
            raise InputError(f"the model is not a loadable ONNX graph: {exc}") from exc


def _window_feature(feature: FeatureSpec, by_entity: WindowSpec, label: str) -> Column:
    from pyspark.sql import functions as sf
    from pyspark.sql.window import Window

    window_us = int(feature.window_delta.total_seconds() * _MICROS)  # as mlops.features computes it
    if feature.is_label:
        delay_us = int(feature.delay_delta.total_seconds() * _MICROS)
        seen = by_entity.rangeBetween(-(delay_us + window_us), -(delay_us + 1))
        labels = sf.col(label).cast("double")
        positives = sf.coalesce(sf.sum(labels).over(seen), sf.lit(0.0))
        if feature.agg == "label_count":
            return positives
        known = sf.count(labels).over(seen)
        return sf.when(known == 0, sf.lit(0.0)).otherwise(positives / known.cast("double"))
    if feature.agg == "seconds_since_previous":
        previous = sf.max(_T_US).over(by_entity.rangeBetween(Window.unboundedPreceding, -1))
        cap = sf.lit(window_us / _MICROS)
        # An exact integer gap (< 2**53) divided once: the same rounding as Python's int / int.
        gap = (sf.col(_T_US) - previous).cast("double") / sf.lit(float(_MICROS))
        return sf.when(previous.isNull(), cap).otherwise(sf.least(gap, cap))
    in_window = by_entity.rangeBetween(-window_us, -1)
    if feature.agg == "count":
        return sf.count(sf.lit(1)).over(in_window).cast("double")
    if feature.column is None:  # the contract forbids this; narrows the type
        raise ConfigError(f"feature {feature.name!r} has no column")
    if feature.uses_current_value:
        return _current_value_feature(feature.agg, sf.col(feature.column).cast("double"), in_window)
    aggregate = {"sum": sf.sum, "mean": sf.avg, "max": sf.max}[feature.agg]
    return sf.coalesce(aggregate(sf.col(feature.column).cast("double")).over(in_window), sf.lit(0.0))


def _text(contract: DataContract, column: str) -> Column:
    """A key-like column as canonical text: an int's decimal digits (as mlops.features.canonical_text)."""
    from pyspark.sql import functions as sf

    value = sf.col(column)
    return (value.cast("long") if contract.column(column).dtype == "int" else value).cast("string")


def _text_feature(feature: FeatureSpec, key: str, by_entity: WindowSpec, text: Column) -> Column:
    """``distinct_count`` (a set of the window's texts) or a pair feature (a window over the entity
    and the text: the pair's newest earlier instant)."""
    from pyspark.sql import functions as sf
    from pyspark.sql.window import Window

    window_us = int(feature.window_delta.total_seconds() * _MICROS)
    if feature.agg == "distinct_count":  # collect_set skips nulls
        return sf.size(sf.collect_set(text).over(by_entity.rangeBetween(-window_us, -1))).cast("double")
    by_pair = Window.partitionBy(sf.col(key), text).orderBy(_T_US).rangeBetween(Window.unboundedPreceding, -1)
    previous = sf.max(_T_US).over(by_pair)
    if feature.agg == "pair_seen":
        seen = text.isNotNull() & previous.isNotNull() & (previous >= sf.col(_T_US) - sf.lit(window_us))
        return sf.when(seen, sf.lit(1.0)).otherwise(sf.lit(0.0))
    cap = sf.lit(window_us / _MICROS)
    gap = (sf.col(_T_US) - previous).cast("double") / sf.lit(float(_MICROS))
    return sf.when(text.isNull() | previous.isNull(), cap).otherwise(sf.least(gap, cap))


def _current_value_feature(agg: str, value: Column, in_window: WindowSpec) -> Column:
    """``ratio_to_mean`` / ``zscore`` of the row's own ``value`` against the window's (see mlops.features)."""
    from pyspark.sql import functions as sf

    count = sf.count(value).over(in_window)
    mean = sf.avg(value).over(in_window)
    if agg == "ratio_to_mean":
        return sf.when((count == 0) | (mean == 0), sf.lit(1.0)).otherwise(value / mean)
    constant = sf.min(value).over(in_window) == sf.max(value).over(in_window)
    return (sf.when((count < 2) | constant, sf.lit(0.0))
            .otherwise((value - mean) / sf.sqrt(sf.var_pop(value).over(in_window))))


def _time_features(names: tuple[str, ...]) -> dict[str, Column]:
    from pyspark.sql import functions as sf

    # The UTC second of the day as an integer plus the microseconds as a fraction, then the angles,
    # in mlops.features.time_feature_values' order of operations (no decimal literals: sf.lit doubles).
    whole = sf.expr(f"cast(pmod({_T_US}, {_DAY_US}) div {_MICROS} as double)")
    fraction = sf.expr(f"cast(pmod({_T_US}, {_MICROS}) as double)") / sf.lit(float(_MICROS))
    seconds = whole + fraction
    weekday = sf.expr(f"cast(pmod(({_T_US} - pmod({_T_US}, {_DAY_US})) div {_DAY_US} + {_EPOCH_WEEKDAY}, 7) as double)")
    hour_angle = sf.lit(2 * math.pi) * seconds / sf.lit(86_400.0)
    week_angle = sf.lit(2 * math.pi) * (weekday + seconds / sf.lit(86_400.0)) / sf.lit(7.0)
    encodings = {
        "hour_of_day_sin": sf.sin(hour_angle), "hour_of_day_cos": sf.cos(hour_angle),
        "day_of_week_sin": sf.sin(week_angle), "day_of_week_cos": sf.cos(week_angle),
    }
    return {name: encodings[name] for name in names}


def _event_micros(frame: DataFrame, column: str) -> Column:
    """Microseconds since the epoch, UTC; nanoseconds are floored as pandas floors them."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as st

    kind = frame.schema[column].dataType
    if isinstance(kind, st.TimestampType):
        return sf.unix_micros(sf.col(column))
    if isinstance(kind, st.TimestampNTZType):  # zone-less: read as UTC (the session zone of the call)
        return sf.unix_micros(sf.col(column).cast("timestamp"))
    if isinstance(kind, st.LongType):  # pandas' TIMESTAMP(NANOS), read as longs
        return sf.expr(f"(`{column}` - pmod(`{column}`, 1000)) div 1000")
    raise InputError(f"column {column!r} must hold timestamps, not {kind.simpleString()}", field=column)


def _raw_columns(contract: DataContract) -> list[str]:
    keys = [contract.entity(view.entity).join_key for view in contract.feature_views]
    values = [c for view in contract.feature_views for c in (*view.value_columns, *view.text_columns)]
    values += [contract.label_column] if any(view.uses_labels for view in contract.feature_views) else []
    return list(dict.fromkeys([contract.id_column, contract.timestamp_column, *keys, *values]))


def _require(frame: DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{what} lack the columns {missing}", field=missing[0])


def _read_parquet(spark: SparkSession, location: Location, what: str) -> DataFrame:
    from pyspark.errors import AnalysisException

    if isinstance(location, Path) and not location.exists():
        raise InputError(f"{what}: {location} does not exist")
    try:
        return spark.read.parquet(str(location))
    except AnalysisException as exc:
        raise InputError(f"{what}: cannot read {location} as Parquet: {str(exc).splitlines()[0]}") from exc


def _refuse_overlap(source: Location, out: Location) -> None:
    """Writing over the input (or a folder holding it) would lose the data being read."""
    if isinstance(source, Path) and isinstance(out, Path):
        src, dst = source.resolve(), out.resolve()
        if src == dst or src.is_relative_to(dst) or dst.is_relative_to(src):
            raise InputError(f"the output {out} overlaps the input {source}: choose another path")
    elif str(source).rstrip("/") == str(out).rstrip("/"):
        raise InputError(f"the output {out} is the input: choose another path")


@contextmanager
def _session_conf(spark: SparkSession) -> Iterator[None]:
    previous = {key: spark.conf.get(key, None) for key in _SESSION_CONF}
    for key, value in _SESSION_CONF.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in previous.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)
