"""`mlops train` and the pipeline's train and export tasks are one path: on the same splits and settings
they write the same ONNX file, byte for byte, and both carry the contract's hash that the service checks."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from mlops import registry
from mlops.cli import app
from mlops.contract import DataContract
from mlops.registry import ONNX_FILE
from mlops.settings import Settings
from pipelines import tasks
from pipelines.splits import split_paths


@pytest.fixture(scope="module")
def two_epochs(home: Path) -> Iterator[None]:
    """Two epochs of the small splits: enough for two trainings to drift apart, over in seconds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_MAX_EPOCHS", "2")
        yield


@pytest.fixture(scope="module")
def pipeline_onnx(home: Path, data_dir: Path, two_epochs: None) -> Path:
    """The pipeline's train and export tasks on ``data_dir``'s splits, copied to extensionless files as
    KFP hands artifacts over; returns the exported file."""
    settings = Settings()
    registry.client(settings)
    run_id = MlflowClient().create_run(registry.ensure_experiment(settings)).info.run_id
    artifacts = home / "pipeline"
    splits = {name: artifacts / "preprocess" / name for name in ("train", "validation", "test")}
    for name, path in split_paths(data_dir).items():
        splits[name].parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, splits[name])
    model_dir, onnx_dir = artifacts / "train" / "model", artifacts / "export" / "onnx"
    tasks.train_task(splits["train"], splits["validation"], splits["test"], run_id, model_dir)
    tasks.export_task(model_dir, splits["test"], run_id, onnx_dir)
    return onnx_dir / ONNX_FILE


def _metadata(path: Path) -> dict[str, str]:
    return {prop.key: prop.value for prop in onnx.load(str(path)).metadata_props}


def test_mlops_train_writes_the_pipelines_onnx_file_byte_for_byte(
    home: Path, data_dir: Path, pipeline_onnx: Path, contract: DataContract
) -> None:
    result = CliRunner().invoke(app, ["train", "--data-dir", str(data_dir), "--out-dir", str(home / "cli")])
    assert result.exit_code == 0, result.output
    command_onnx = home / "cli" / "onnx" / ONNX_FILE
    assert command_onnx.read_bytes() == pipeline_onnx.read_bytes()
    for path in (command_onnx, pipeline_onnx):
        assert _metadata(path)["contract_sha256"] == contract.fingerprint
