"""Batch scoring: every row of a file with its point-in-time features (the backfill), the chosen
version's fraud probability and its decision, the way the service decides.

Columnar and streamed: the features are backfilled to a Parquet file, then scored a record batch
at a time with ONNX Runtime (no torch) and appended to the output, so memory is bounded by a batch.
With ``feature_engine=spark`` both the backfill and the scoring run on Spark.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from mlops.backfill import backfill_features, spark_module
from mlops.backfill.duckdb_engine import connection, parquet_scan
from mlops.contract import DataContract
from mlops.registry import ServedModel, download_serving_model, download_version
from mlops.settings import Settings

if TYPE_CHECKING:
    from mlops.inference import OnnxModel

BATCH_ROWS = 65_536
PROBABILITY, DECISION, MODEL_VERSION = "probability", "decision", "model_version"

Progress = Callable[[int, int], None]  # (rows scored so far, rows in all)


class ScoringSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out: str
    rows: int
    frauds: int
    model_version: str
    threshold: float
    seconds: float


def score_file(source: Path, out: Path, contract: DataContract, settings: Settings, *,
               version: str | None = None, progress: Progress | None = None) -> ScoringSummary:
    """Score every row of ``source`` (Parquet file or folder) into ``out`` (Parquet).

    ``version`` picks a registered version; by default the one holding the serving alias.
    """
    from mlops.inference import OnnxModel

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="predict-", dir=_scratch(settings)))
    try:
        served = _model(settings, work / "model", version)
        model = OnnxModel(served.onnx_path)
        features = work / "features.parquet"
        backfill_features(source, features, contract, settings)
        staged = out.with_name(f".{out.name}.partial")
        out.parent.mkdir(parents=True, exist_ok=True)
        if settings.feature_engine == "spark":
            spark_out = work / "scored.parquet"
            spark_module().score_spark(features, served.onnx_path.read_bytes(), spark_out, contract)
            rows, frauds = _decide(spark_out, staged, model.threshold, served.version)
        else:
            rows, frauds = _score_batches(model, features, staged, served.version, progress)
        staged.replace(out)  # never a half-written output under the asked name
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ScoringSummary(out=str(out), rows=rows, frauds=frauds, model_version=served.version,
                          threshold=model.threshold, seconds=round(time.perf_counter() - started, 3))


def _scratch(settings: Settings) -> Path:
    folder = settings.runs_dir / "predict"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _model(settings: Settings, dest: Path, version: str | None) -> ServedModel:
    return download_serving_model(settings, dest) if version is None else download_version(settings, version, dest)


def _score_batches(model: OnnxModel, features: Path, out: Path, version: str,
                   progress: Progress | None) -> tuple[int, int]:
    """Probability (float64 of the graph's float32, as the service answers), decision ("fraud" at
    or above the version's threshold, as the service decides) and version, per record batch."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.ParquetFile(features)
    total = table.metadata.num_rows
    done = frauds = 0
    writer: pq.ParquetWriter | None = None
    try:
        for batch in table.iter_batches(batch_size=BATCH_ROWS):
            columns = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in model.input_names
                       if name in batch.schema.names}
            probability = model.predict_columns(columns).astype(np.float64)
            fraud = probability >= model.threshold
            scored = pa.Table.from_batches([batch]).append_column(PROBABILITY, pa.array(probability))
            scored = scored.append_column(DECISION, pa.array(np.where(fraud, "fraud", "legit")))
            scored = scored.append_column(MODEL_VERSION, pa.array([version] * batch.num_rows, pa.string()))
            if writer is None:
                writer = pq.ParquetWriter(out, scored.schema)
            writer.write_table(scored)
            done += batch.num_rows
            frauds += int(fraud.sum())
            if progress is not None:
                progress(done, total)
        if writer is None:  # no rows: still a file with the columns
            empty = table.schema_arrow.append(pa.field(PROBABILITY, pa.float64()))
            empty = empty.append(pa.field(DECISION, pa.string())).append(pa.field(MODEL_VERSION, pa.string()))
            pq.write_table(empty.empty_table(), out)
    finally:
        if writer is not None:
            writer.close()
    return done, frauds


def _decide(scored: Path, out: Path, threshold: float, version: str) -> tuple[int, int]:
    """Spark's probabilities plus the decision and version columns, as the embedded path writes them."""
    target = str(out).replace("'", "''")
    with connection(out.parent / f".{out.name}.spill") as con:
        con.execute(f"COPY (SELECT *, CASE WHEN {PROBABILITY} >= {threshold!r} THEN 'fraud' ELSE 'legit' END "
                    f"AS {DECISION}, '{version}' AS {MODEL_VERSION} FROM {parquet_scan(scored)}) "
                    f"TO '{target}' (FORMAT parquet)")
        [(rows, frauds)] = con.sql(f"SELECT count(*), count(*) FILTER (WHERE {DECISION} = 'fraud') "
                                   f"FROM {parquet_scan(out)}").fetchall()
    return int(rows), int(frauds)
