"""`mlops train`: one process, --reproduce and --search, against a real MLflow store on SQLite; on the same
splits and settings it writes the pipeline's ONNX file, byte for byte. Under torchrun (2 gloo ranks) the
same loop trains a user's module in tests/pipelines/training/test_torch_family_ddp.py."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract
from mlops_cli.app import app
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration

runner = CliRunner()
ENV = {"MLOPS_MAX_EPOCHS": "5", "MLOPS_PATIENCE": "10", "MLOPS_DROPOUT": "0", "MLOPS_DEVICE": "cpu",
       "MLOPS_SEED": "3", "MLOPS_BATCH_SIZE": "256"}
RUN_LINE = re.compile(r"run ([0-9a-f]{32}):")


@pytest.fixture(scope="module")
def home(home: Path) -> Iterator[Path]:
    """The module's MLflow home, with the small training settings of ENV."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in ENV.items():
            patch.setenv(key, value)
        yield home


@pytest.fixture(scope="module")
def single_run(home: Path, data_dir: Path) -> str:
    result = runner.invoke(app, ["train", "--data-dir", str(data_dir), "--out-dir", str(home / "single")])
    assert result.exit_code == 0, result.output
    match = RUN_LINE.search(result.output)
    assert match is not None, result.output
    return match.group(1)


def _client(home: Path) -> MlflowClient:
    return registry.client(PipelineSettings(home=home))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_single_process_run_logs_model_metrics_and_calibration(home: Path, single_run: str) -> None:
    run = _client(home).get_run(single_run)
    assert run.data.tags["onnx_sha256"] == _sha256(home / "single" / "onnx" / "model.onnx")  # the file written
    assert run.data.params["world_size"] == "1"
    assert run.data.params["train.dropout"] == "0.0"
    assert run.data.metrics["test_brier"] < run.data.metrics["test_brier_uncalibrated"]
    assert run.data.metrics["test_f1"] > 0.3


def test_single_run_lists_its_three_splits_as_mlflow_datasets(home: Path, data_dir: Path, single_run: str) -> None:
    import json

    import pandas as pd

    from pipelines.training.entry import file_sha256

    inputs = _client(home).get_run(single_run).inputs
    assert inputs is not None
    found = {next(t.value for t in i.tags if t.key == "mlflow.data.context"): i.dataset for i in inputs.dataset_inputs}
    assert set(found) == {"training", "validation", "testing"}
    for context, split in (("training", "train"), ("validation", "validation"), ("testing", "test")):
        dataset, path = found[context], data_dir / f"{split}.parquet"
        frame = pd.read_parquet(path)
        profile = json.loads(str(dataset.profile))
        # No ingest snapshot behind `mlops train --data-dir`: the split file's own hash is the digest.
        assert dataset.digest == file_sha256(path)[:36]
        assert (profile["num_rows"], profile["positives"]) == (len(frame), int(frame["is_fraud"].sum()))
        assert json.loads(dataset.source)["uri"] == str(path.resolve())
        assert {c["name"] for c in json.loads(str(dataset.schema))["mlflow_colspec"]} == set(frame.columns)


def test_reproduce_gives_identical_metrics_and_onnx_hash(home: Path, single_run: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Another calibration setting here: the reproduction calibrates as the run recorded, not as this says.
    monkeypatch.setenv("MLOPS_CALIBRATION", "none")
    result = runner.invoke(app, ["train", "--reproduce", single_run, "--out-dir", str(home / "again")])
    assert result.exit_code == 0, result.output
    client = _client(home)
    [again] = client.search_runs([client.get_run(single_run).info.experiment_id],
                                 filter_string=f"tags.reproduces = '{single_run}'")
    original = client.get_run(single_run)
    test_metrics = {k: v for k, v in original.data.metrics.items() if k.startswith("test_")}
    assert {"test_f1", "test_brier", "test_brier_uncalibrated"} <= test_metrics.keys()
    assert {k: again.data.metrics[k] for k in test_metrics} == test_metrics
    assert again.data.tags["onnx_sha256"] == original.data.tags["onnx_sha256"]
    assert again.data.params["calibration_setting"] == original.data.params["calibration_setting"] == "auto"
    assert "NO" not in result.output


def test_reproduce_reruns_a_tree_family_from_its_recorded_params_seed_and_splits(
        home: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trained = runner.invoke(app, ["train", "--family", "xgboost", "--data-dir", str(data_dir),
                                  "--out-dir", str(home / "xgboost")])
    assert trained.exit_code == 0, trained.output
    match = RUN_LINE.search(trained.output)
    assert match is not None, trained.output
    # This environment says otherwise: the reproduction follows the run, not these.
    monkeypatch.setenv("MLOPS_SEED", "99")
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "mlp")
    result = runner.invoke(app, ["train", "--reproduce", match.group(1), "--out-dir", str(home / "xgboost-again")])
    assert result.exit_code == 0, result.output
    assert "NO" not in result.output
    client = _client(home)
    original = client.get_run(match.group(1))
    [again] = client.search_runs([original.info.experiment_id], filter_string=f"tags.reproduces = '{match.group(1)}'")
    assert {k: again.data.params[k] for k in ("model_family", "model_params", "seed")} == {
        k: original.data.params[k] for k in ("model_family", "model_params", "seed")}
    assert original.data.params["model_family"] == "xgboost"
    test_metrics = {k: v for k, v in original.data.metrics.items() if k.startswith("test_")}
    assert {"test_f1", "test_pr_auc"} <= test_metrics.keys()
    assert {k: again.data.metrics[k] for k in test_metrics} == test_metrics
    assert again.data.tags["onnx_sha256"] == original.data.tags["onnx_sha256"]


@pytest.fixture(scope="module")
def pipeline_onnx(home: Path, data_dir: Path) -> Path:
    """The pipeline's train and export tasks on the single run's splits, copied to extensionless files as
    KFP hands artifacts over; returns the file the export task wrote."""
    import shutil

    from mlops.registry import ONNX_FILE
    from pipelines.orchestration import tasks
    from pipelines.orchestration.context import StepContext
    from pipelines.orchestration.records import IngestRecord
    from pipelines.splits import split_paths

    client = _client(home)
    run_id = client.create_run(registry.ensure_experiment(PipelineSettings())).info.run_id
    artifacts = home / "pipeline"
    splits = {name: artifacts / "preprocess" / name for name in ("train", "validation", "test")}
    for name, path in split_paths(data_dir).items():
        splits[name].parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, splits[name])
    model_dir, onnx_dir = artifacts / "train" / "model", artifacts / "export" / "onnx"
    context = StepContext.of(PipelineSettings())
    trained = tasks.train_task(context, train=splits["train"], validation=splits["validation"], test=splits["test"],
                               ingested=IngestRecord(run_id=run_id, dataset_sha256=""), model=model_dir)
    tasks.export_task(context, model=model_dir, test=splits["test"], trained=trained, onnx=onnx_dir)
    return onnx_dir / ONNX_FILE


def test_mlops_train_writes_the_pipelines_onnx_file_byte_for_byte(
    home: Path, single_run: str, pipeline_onnx: Path, contract: DataContract
) -> None:
    import onnx

    command_onnx = home / "single" / "onnx" / "model.onnx"
    assert command_onnx.read_bytes() == pipeline_onnx.read_bytes()
    for path in (command_onnx, pipeline_onnx):
        metadata = {prop.key: prop.value for prop in onnx.load(str(path)).metadata_props}
        assert metadata["contract_sha256"] == contract.fingerprint  # the service checks it on load


def test_search_runs_nested_trials_and_trains_the_best(home: Path, data_dir: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "2")
    result = runner.invoke(app, ["train", "--search", "2", "--data-dir", str(data_dir), "--out-dir",
                                 str(home / "searched")])
    assert result.exit_code == 0, result.output
    match = RUN_LINE.search(result.output)
    assert match is not None, result.output
    parent = match.group(1)
    client = _client(home)
    experiment_id = client.get_run(parent).info.experiment_id
    trials = client.search_runs([experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'")
    assert len(trials) == 2
    best = max(trials, key=lambda t: t.data.metrics["best_val_pr_auc"])
    parent_params = client.get_run(parent).data.params
    trained_with = {k: v for k, v in parent_params.items() if k.startswith("train.")}
    assert trained_with == {k: v for k, v in best.data.params.items() if k.startswith("train.")}
    assert parent_params["search_trials"] == "2"


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["train"], "--data-dir is required", 2),
        (["train", "--data-dir", "/nonexistent"], "lacks split files", 2),
        (["train", "--reproduce", "abc", "--search", "2"], "--reproduce takes no", 2),
        (["train", "--reproduce", "0123456789abcdef0123456789abcdef"], "no MLflow run", 4),
    ],
)
def test_bad_input_is_one_clear_line(home: Path, args: list[str], message: str, code: int) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output
