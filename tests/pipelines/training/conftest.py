"""The training tests' MLflow home: a fresh store and small, CPU-only, seeded training settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest
from mlflow_stores import copy_mlflow_template

# Dropout off: the 2-rank run then sees exactly the single run's batches (see pipelines/training/distributed.shard),
# so its F1 differs only by floating-point summation order, not by sampling noise on a tiny test split.
TRAIN_ENV = {"MLOPS_MAX_EPOCHS": "5", "MLOPS_PATIENCE": "10", "MLOPS_DROPOUT": "0", "MLOPS_DEVICE": "cpu",
             "MLOPS_SEED": "3", "MLOPS_BATCH_SIZE": "256"}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, mlflow_template: Path) -> Iterator[Path]:
    """MLOPS_HOME with an empty MLflow store and TRAIN_ENV set for one test module."""
    path = copy_mlflow_template(mlflow_template, tmp_path_factory.mktemp("train-home"))
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**TRAIN_ENV, "MLOPS_HOME": str(path)}.items():
            patch.setenv(key, value)
        yield path
    mlflow.set_tracking_uri(None)  # type: ignore[arg-type]  # None = unset, the environment decides again
    mlflow.set_registry_uri(None)  # type: ignore[arg-type]
