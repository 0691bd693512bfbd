"""Preprocess: publish the entity histories to Feast's offline store, join them point-in-time for
training, and split by time. The online store is left alone: what production serves changes only
through `mlops features materialize` and the service's write-through, never through a training run."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict

from mlops.contract import DataContract
from mlops.feature_store import publish_features, read_offline_tables, training_features
from mlops.settings import Settings

SPLITS = ("train", "validation", "test")


class SplitSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    rows: int
    positives: int
    start: str
    end: str


def time_split(frame: pd.DataFrame, contract: DataContract) -> dict[str, pd.DataFrame]:
    """Oldest rows train, then validation, newest test; no row of a later split precedes an earlier one."""
    ordered = frame.sort_values([contract.timestamp_column, contract.id_column], kind="stable")
    n = len(ordered)
    n_test = round(n * contract.split.test_fraction)
    n_val = round(n * contract.split.validation_fraction)
    n_train = n - n_val - n_test
    if min(n_train, n_val, n_test) < 1:
        raise ValueError(f"{n} rows are too few to split into train/validation/test")
    bounds = {"train": (0, n_train), "validation": (n_train, n_train + n_val), "test": (n_train + n_val, n)}
    return {name: ordered.iloc[a:b].reset_index(drop=True) for name, (a, b) in bounds.items()}


def preprocess(snapshot_path: Path, contract: DataContract, settings: Settings,
               out_dir: Path) -> list[SplitSummary]:
    """Write train/validation/test Parquet files (raw columns + features + label) into out_dir."""
    frame = pd.read_parquet(snapshot_path)
    store = publish_features(frame, contract, settings)
    enriched = training_features(store, frame, contract, read_offline_tables(settings, contract))
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = []
    ts = contract.timestamp_column
    for name, part in time_split(enriched, contract).items():
        path = out_dir / f"{name}.parquet"
        part.to_parquet(path, index=False)
        summaries.append(SplitSummary(
            name=name, path=str(path), rows=len(part), positives=int(part[contract.label_column].sum()),
            start=str(part[ts].min()), end=str(part[ts].max()),
        ))
    return summaries
