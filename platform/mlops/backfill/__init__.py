"""The feature backfill: every transaction's point-in-time features, computed by a columnar engine.

``Settings.feature_engine`` chooses it: ``duckdb`` (embedded, out of core, the default) or
``spark`` (the same definitions on Apache Spark; the optional ``spark`` extra). Both read a Parquet
file or folder of raw transactions and write one Parquet file: every input column plus one float64
column per contract feature, one row per input row.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel, ConfigDict

from mlops.backfill.duckdb_engine import backfill_duckdb, connection, parquet_scan
from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.settings import Settings

SPARK_INSTALL = "pip install 'mlops-platform[spark]'"


class BackfillSummary(BaseModel):
    """What one backfill wrote."""

    model_config = ConfigDict(extra="forbid")

    engine: str
    out: str
    rows: int
    seconds: float


def spark_module() -> ModuleType:
    """``mlops.backfill.spark_engine``, or a ConfigError saying how to install it."""
    try:
        importlib.import_module("pyspark")
        return importlib.import_module("mlops.backfill.spark_engine")
    except ImportError as exc:
        raise ConfigError(f"the spark engine needs the `spark` extra: {SPARK_INSTALL} ({exc})") from exc


def backfill_features(source: Path, out: Path, contract: DataContract, settings: Settings) -> BackfillSummary:
    """Backfill ``source`` into ``out`` with the engine ``settings.feature_engine`` names."""
    import pyarrow.parquet as pq

    started = time.perf_counter()
    if settings.feature_engine == "spark":
        _spark_to_one_file(source, out, contract)
    else:
        backfill_duckdb(source, out, contract)
    return BackfillSummary(engine=settings.feature_engine, out=str(out), rows=pq.ParquetFile(out).metadata.num_rows,
                           seconds=round(time.perf_counter() - started, 3))


def _spark_to_one_file(source: Path, out: Path, contract: DataContract) -> None:
    """Spark writes a folder of part files; the offline store and its readers take one file, so the
    parts are streamed into it (DuckDB, memory bounded) and the folder removed."""
    import shutil

    parts = out.parent / f".{out.name}.spark"
    try:
        spark_module().backfill_spark(source, parts, contract)
        target = str(out).replace("'", "''")
        with connection(out.parent / f".{out.name}.spill") as con:
            con.execute(f"COPY (SELECT * FROM {parquet_scan(parts)}) TO '{target}' (FORMAT parquet)")
    finally:
        shutil.rmtree(parts, ignore_errors=True)
