"""The two registered feature engines: ``duckdb`` (embedded, out of core, the default) and ``spark``
(the same definitions on Apache Spark; the optional ``spark`` extra)."""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from mlops.backfill.duckdb_engine import backfill_duckdb, connection, parquet_scan
from mlops.backfill.interface import PROBABILITY, FeatureEngine, Scored, register_engine
from mlops.backfill.latest_state import latest_histories
from mlops.contract import DataContract, FeatureViewSpec
from mlops.errors import ConfigError
from mlops.histories import History

if TYPE_CHECKING:
    import pyarrow as pa

    from mlops.inference import OnnxModel

SPARK_INSTALL = "pip install 'mlops-platform[spark]'"


@register_engine
class DuckDBEngine(FeatureEngine):
    """DuckDB's window SQL under ``duckdb_memory_limit``; scoring with ONNX Runtime in this process."""

    name = "duckdb"

    def backfill(self, source: Path, out: Path, contract: DataContract) -> None:
        backfill_duckdb(source, out, contract, self.settings.duckdb_memory_limit)

    def latest_histories(self, offline: Path, contract: DataContract, view: FeatureViewSpec, end: datetime,
                         start: datetime | None, *, batch: int) -> Iterator[list[tuple[str, History]]]:
        return latest_histories(offline, contract, view, end, start, batch=batch,
                                memory_limit=self.settings.duckdb_memory_limit,
                                lateness_us=int(self.settings.late_event_allowance.total_seconds() * 1_000_000))

    def score(self, features: Path, model: OnnxModel, work: Path, contract: DataContract) -> Scored:
        """Each record batch scored as it is read: probability is float64 of the graph's float32, as
        the service answers."""
        import numpy as np
        import pyarrow as pa

        def with_probability(batch: pa.RecordBatch) -> pa.Table:
            columns = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in model.input_names
                       if name in batch.schema.names}
            probability = model.predict_columns(columns).astype(np.float64)
            return pa.Table.from_batches([batch]).append_column(PROBABILITY, pa.array(probability))

        return Scored(features, with_probability)


@register_engine
class SparkEngine(FeatureEngine):
    """Backfill and scoring on Spark. The offline table Spark's backfill leaves is one local Parquet
    file, so the latest state is read from it the embedded way (DuckDB, memory bounded)."""

    name = "spark"

    def backfill(self, source: Path, out: Path, contract: DataContract) -> None:
        """Spark writes a folder of part files; the offline store and its readers take one file, so the
        parts are streamed into it (DuckDB, memory bounded) and the folder removed."""
        parts = out.parent / f".{out.name}.spark"
        try:
            spark_module().backfill_spark(source, parts, contract)
            target = str(out).replace("'", "''")
            with connection(out.parent / f".{out.name}.spill", self.settings.duckdb_memory_limit) as con:
                con.execute(f"COPY (SELECT * FROM {parquet_scan(parts)}) TO '{target}' (FORMAT parquet)")
        finally:
            shutil.rmtree(parts, ignore_errors=True)

    def latest_histories(self, offline: Path, contract: DataContract, view: FeatureViewSpec, end: datetime,
                         start: datetime | None, *, batch: int) -> Iterator[list[tuple[str, History]]]:
        return DuckDBEngine(self.settings).latest_histories(offline, contract, view, end, start, batch=batch)

    def score(self, features: Path, model: OnnxModel, work: Path, contract: DataContract) -> Scored:
        """Spark writes the probabilities beside the features (a folder of parts)."""
        scored = work / "scored.parquet"
        spark_module().score_spark(features, model.path.read_bytes(), scored, contract)
        return Scored(scored, scored_by_spark)


def scored_by_spark(batch: pa.RecordBatch) -> pa.Table:
    """A batch of Spark's output: its probability column is there already."""
    import pyarrow as pa

    return pa.Table.from_batches([batch])


def spark_module() -> ModuleType:
    """``mlops.backfill.spark_engine``, or a ConfigError saying how to install it."""
    try:
        importlib.import_module("pyspark")
        return importlib.import_module("mlops.backfill.spark_engine")
    except ImportError as exc:
        raise ConfigError(f"the spark engine needs the `spark` extra: {SPARK_INSTALL} ({exc})") from exc
