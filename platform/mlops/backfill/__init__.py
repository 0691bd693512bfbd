"""The feature backfill: every transaction's point-in-time features, computed by a columnar engine.

``Settings.feature_engine`` names the engine (:mod:`mlops.backfill.interface`; the registered ones
are in :mod:`mlops.backfill.engines`): ``duckdb`` (embedded, out of core, the default) or ``spark``
(the same definitions on Apache Spark; the optional ``spark`` extra). Both read a Parquet file or
folder of raw transactions and write one Parquet file: every input column plus one float64 column
per contract feature, one row per input row.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from mlops.backfill import engines as _registered  # noqa: F401  (registers duckdb and spark)
from mlops.backfill.interface import engine_for
from mlops.contract import DataContract
from mlops.settings import Settings

__all__ = ["BackfillSummary", "backfill_features", "engine_for"]


class BackfillSummary(BaseModel):
    """What one backfill wrote."""

    model_config = ConfigDict(extra="forbid")

    engine: str
    out: str
    rows: int
    seconds: float


def backfill_features(source: Path, out: Path, contract: DataContract, settings: Settings) -> BackfillSummary:
    """Backfill ``source`` into ``out`` with the engine ``settings.feature_engine`` names."""
    import pyarrow.parquet as pq

    engine = engine_for(settings)
    started = time.perf_counter()
    engine.backfill(source, out, contract)
    return BackfillSummary(engine=engine.name, out=str(out), rows=pq.ParquetFile(out).metadata.num_rows,
                           seconds=round(time.perf_counter() - started, 3))
