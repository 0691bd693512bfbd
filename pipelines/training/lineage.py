"""The data a training run learned from and was judged on, as MLflow datasets: the run's Datasets
panel in the MLflow UI lists train, validation and test with their source, digest, schema and row
counts, and ``MlflowClient().get_run(id).inputs`` returns them.

The digest is the ingested snapshot's SHA-256 (the pipeline's ingest step records it on the run)
cut to MLflow's 36-character limit; a run without a snapshot (``mlops train --data-dir``) uses each
split file's own hash. The profile keeps both hashes in full.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
from mlflow.entities import Dataset, DatasetInput, InputTag
from mlflow.tracking import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from mlops.contract import DataContract

CONTEXTS = {"train": "training", "validation": "validation", "test": "testing"}
DIGEST_LENGTH = 36  # MLflow's limit on a dataset digest


def split_dataset(frame: pd.DataFrame, *, name: str, source: str, digest: str, profile: dict[str, object],
                  label: str) -> Dataset:
    """One split as an MLflow dataset entity (schema inferred by MLflow, our digest and profile)."""
    from mlflow.data.pandas_dataset import from_pandas

    with warnings.catch_warnings():
        # A local path matches two of MLflow's source resolvers, which it says in a UserWarning;
        # both store the same {"uri": path}.
        warnings.simplefilter("ignore", UserWarning)
        described = from_pandas(frame, source=source, targets=label, name=name,
                                digest=digest[:DIGEST_LENGTH]).to_dict()
    counted = json.loads(described["profile"])
    return Dataset(name=described["name"], digest=described["digest"], source_type=described["source_type"],
                   source=described["source"], schema=described["schema"],
                   profile=json.dumps({**counted, **profile}))


def _schema_sample(path: Path, rows: int = 1_000) -> pd.DataFrame:
    """The split's first rows: enough for MLflow to infer its schema without reading the whole file."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    batch = next(parquet.iter_batches(batch_size=rows), None)
    sample: pd.DataFrame = (batch if batch is not None else parquet.schema_arrow.empty_table()).to_pandas()
    return sample


def _split_profile(path: Path, label: str) -> dict[str, object]:
    """Row count from the Parquet footer and the label's positives from that one column."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    positives = None
    if label in parquet.schema_arrow.names:
        total = pc.sum(pq.read_table(path, columns=[label]).column(label)).as_py()
        positives = int(total or 0)
    return {"num_rows": parquet.metadata.num_rows, "positives": positives}


def log_split_datasets(run_id: str, paths: dict[str, Path], file_sha256: dict[str, str],
                       contract: DataContract) -> None:
    """Log the three splits as the run's dataset inputs, each with its context (training, validation, testing)."""
    client = MlflowClient()
    params = client.get_run(run_id).data.params
    snapshot = params.get("dataset_sha256")
    label = contract.label_column
    inputs = []
    for split, path in paths.items():
        profile: dict[str, object] = {**_split_profile(path, label), "split_sha256": file_sha256[split],
                                      "snapshot_sha256": snapshot}
        dataset = split_dataset(_schema_sample(path), name=f"{contract.name}-{split}",
                                source=params.get("source") or str(path.resolve()),
                                digest=snapshot or file_sha256[split], profile=profile, label=label)
        inputs.append(DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, CONTEXTS[split])]))
    client.log_inputs(run_id, datasets=inputs)
