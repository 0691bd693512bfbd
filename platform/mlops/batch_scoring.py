"""Batch scoring: every row of a file with its point-in-time features (the backfill), the chosen
version's probability and its decision, the way the service decides.

Columnar and streamed: the features are backfilled to a Parquet file, then scored a record batch
at a time with ONNX Runtime (no torch) and appended to the output, so memory is bounded by a batch.
The settings' feature engine (:mod:`mlops.backfill.interface`) runs both the backfill and the
scoring pass; DuckDB scores in this process, Spark on the cluster.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from mlops.backfill import engine_for
from mlops.backfill.interface import PROBABILITY, Scored
from mlops.contract import DataContract
from mlops.registry import ServedModel, download_serving_model, download_version
from mlops.settings import Settings

if TYPE_CHECKING:
    pass

BATCH_ROWS = 65_536
DECISION, MODEL_VERSION = "decision", "model_version"

Progress = Callable[[int, int], None]  # (rows scored so far, rows in all)


class ScoringSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out: str
    rows: int
    positives: int  # rows decided positive
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
    engine = engine_for(settings)
    work = Path(tempfile.mkdtemp(prefix="predict-", dir=_scratch(settings)))
    try:
        served = _model(settings, work / "model", version)
        model = OnnxModel(served.onnx_path)
        features = work / "features.parquet"
        engine.backfill(source, features, contract)
        staged = out.with_name(f".{out.name}.partial")
        out.parent.mkdir(parents=True, exist_ok=True)
        scored = engine.score(features, model, work, contract)
        rows, positives = _write_decided(scored, staged, model.threshold, served.version, contract, progress)
        staged.replace(out)  # never a half-written output under the asked name
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return ScoringSummary(out=str(out), rows=rows, positives=positives, model_version=served.version,
                          threshold=model.threshold, seconds=round(time.perf_counter() - started, 3))


def _scratch(settings: Settings) -> Path:
    folder = settings.runs_dir / "predict"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _model(settings: Settings, dest: Path, version: str | None) -> ServedModel:
    return download_serving_model(settings, dest) if version is None else download_version(settings, version, dest)


def _write_decided(scored: Scored, out: Path, threshold: float, version: str, contract: DataContract,
                   progress: Progress | None) -> tuple[int, int]:
    """Each record batch of the scoring pass with its decisions (the contract's rule, as the service
    decides) and ``version``, into ``out``."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq


    dataset = ds.dataset(scored.source, format="parquet")
    total = dataset.count_rows()
    done = positives = 0
    writer: pq.ParquetWriter | None = None
    try:
        for batch in dataset.to_batches(batch_size=BATCH_ROWS):
            table = scored.with_probability(batch)
            decisions = [contract.decisions.of(p, threshold) for p in table.column(PROBABILITY).to_pylist()]
            table = table.append_column(DECISION, pa.array(decisions, pa.string()))
            table = table.append_column(MODEL_VERSION, pa.array([version] * table.num_rows, pa.string()))
            if writer is None:
                writer = pq.ParquetWriter(out, table.schema)
            writer.write_table(table)
            done += table.num_rows
            positives += decisions.count(contract.decisions.positive)
            if progress is not None:
                progress(done, total)
        if writer is None:  # no rows: still a file with the columns (the backfill's have no probability yet)
            empty = dataset.schema
            if PROBABILITY not in empty.names:
                empty = empty.append(pa.field(PROBABILITY, pa.float64()))
            empty = empty.append(pa.field(DECISION, pa.string())).append(pa.field(MODEL_VERSION, pa.string()))
            pq.write_table(empty.empty_table(), out)
    finally:
        if writer is not None:
            writer.close()
    return done, positives
