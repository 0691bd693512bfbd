"""The calibration setting is part of the training fingerprint: two trainings that differ only in it are
not the same training (their checkpoints, ONNX metadata and MLflow runs say so), while the default keeps
the fingerprint every earlier run recorded, and ``--reproduce`` reproduces a run's own setting."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest
from threadpoolctl import threadpool_limits
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract
from mlops_cli.app import app
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training.entry import run_training, training_fingerprint
from pipelines.training.families.bundled import family_for
from pipelines.training.family_training import family_fingerprint
from pipelines.training.trained_model import read_summary
from pipelines.training.trainer import TrainParams

runner = CliRunner()
SMALL: dict[str, Any] = {"max_epochs": 2, "patience": 2, "device": "cpu", "seed": 3, "batch_size": 256}
RUN_LINE = re.compile(r"run ([0-9a-f]{32}):")


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with threadpool_limits(limits=1):
        yield


@pytest.mark.unit
def test_each_calibration_setting_is_its_own_fingerprint_and_the_default_the_old_one(contract: DataContract) -> None:
    params = TrainParams.from_settings(PipelineSettings(**SMALL))
    data = {"train": "a", "validation": "b", "test": "c"}
    loop = {setting: training_fingerprint(params, data, contract, None, setting)
            for setting in ("auto", "platt", "isotonic", "none")}
    assert len(set(loop.values())) == 4
    assert loop["auto"] == training_fingerprint(params, data, contract)  # as recorded before the setting
    xgboost = {setting: family_fingerprint(family_for(PipelineSettings(model_family="xgboost")), 3, data,
                                           contract, setting) for setting in ("auto", "platt", "isotonic", "none")}
    assert len(set(xgboost.values())) == 4


@pytest.mark.integration
@pytest.mark.parametrize("family", ["mlp", "xgboost"])
def test_two_trainings_differing_only_in_calibration_are_not_the_same(
        family: str, data_dir: Path, tmp_path: Path, contract: DataContract) -> None:
    checkpoints = tmp_path / "checkpoints"
    fingerprints = {}
    for setting in ("platt", "isotonic"):
        settings = PipelineSettings(**SMALL, model_family=family, calibration=setting,
                                    model_params={"n_estimators": 20} if family == "xgboost" else {})
        out_dir = tmp_path / setting
        run_training(split_paths(data_dir), out_dir, str(checkpoints), settings=settings)
        fingerprints[setting] = read_summary(out_dir).fingerprint
    assert fingerprints["platt"] != fingerprints["isotonic"]
    if family == "mlp":
        # Each its own checkpoint folder: the isotonic run did not resume the Platt run's final state.
        assert sorted(path.name for path in checkpoints.iterdir()) == \
            sorted(fingerprint[:16] for fingerprint in fingerprints.values())


@pytest.mark.integration
def test_reproduce_trains_with_the_runs_own_calibration_setting(
        data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contract: DataContract,
        new_mlflow_home: Callable[[Path], Path]) -> None:
    home = new_mlflow_home(tmp_path / "home")
    monkeypatch.setenv("MLOPS_HOME", str(home))
    for name, value in SMALL.items():
        monkeypatch.setenv(f"MLOPS_{name.upper()}", str(value))
    monkeypatch.delenv("MLOPS_MODEL_FAMILY", raising=False)
    monkeypatch.setenv("MLOPS_CALIBRATION", "isotonic")
    trained = runner.invoke(app, ["train", "--data-dir", str(data_dir), "--out-dir", str(tmp_path / "first")])
    assert trained.exit_code == 0, trained.output
    match = RUN_LINE.search(trained.output)
    assert match is not None
    run_id = match.group(1)

    monkeypatch.setenv("MLOPS_CALIBRATION", "platt")  # this shell's setting: the run's own wins
    again = runner.invoke(app, ["train", "--reproduce", run_id, "--out-dir", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output  # test metrics and the ONNX file (its fingerprint inside) equal
    client = registry.client(PipelineSettings(home=home))
    original = client.get_run(run_id).data
    metadata = {p.key: p.value for p in onnx.load(str(tmp_path / "again" / "onnx" / "model.onnx")).metadata_props}
    assert metadata["training_fingerprint"] == original.params["training_fingerprint"]
    assert original.params["calibration_setting"] == "isotonic"
    params = TrainParams.from_settings(PipelineSettings(**SMALL))
    data = {name: original.params[f"{name}_sha256"] for name in ("train", "validation", "test")}
    assert original.params["training_fingerprint"] == training_fingerprint(params, data, contract, None, "isotonic")
    assert original.params["training_fingerprint"] != training_fingerprint(params, data, contract, None, "platt")
