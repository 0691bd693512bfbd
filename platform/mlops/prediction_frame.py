"""The prediction log as one table, for monitoring and `mlops predictions`: pandas, which the
service that writes the log (:mod:`mlops.prediction_log`) never loads."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa

from mlops.prediction_log import FLAT_PREFIXES, PLAIN_FIELDS, window_tables


def read_prediction_frame(directory: Path, *, start: datetime | None = None,
                          end: datetime | None = None, arrow_strings: bool = False) -> pd.DataFrame:
    """One row per prediction in ``[start, end)`` by logged_at, oldest first.

    Columns: event_id, request_id, event_timestamp, logged_at, model_name, model_version, role,
    probability, decision, latency_s, unknown_entities and unknown_categories (lists), retry and
    features_exact (null in segments written before they were logged), then the entity keys, raw
    inputs and computed features under their own names.

    ``arrow_strings``: text and list columns stay in Arrow's buffers (pandas' ArrowDtype) instead of
    one Python object per value: ten million predictions' dozen text columns took 10 GB as objects.
    """
    tables = window_tables(directory, start, end)
    if not tables:
        return pd.DataFrame(columns=list(PLAIN_FIELDS))
    table = pa.concat_tables(tables, promote_options="default")
    frame: pd.DataFrame = table.to_pandas(types_mapper=arrow_backed if arrow_strings else None)
    renamed = {c: c.split(".", 1)[1] for c in frame.columns if c.startswith(FLAT_PREFIXES)}
    return frame.rename(columns=renamed).sort_values("logged_at", kind="stable").reset_index(drop=True)


def arrow_backed(kind: pa.DataType) -> pd.ArrowDtype | None:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_list(kind):
        return pd.ArrowDtype(kind)
    return None
