"""The ``torch`` family (issue 40): a data scientist's own module (tests/pipelines/training/user_nets.py)
trained by the platform's loop, exported through the MLP's path with its parity, answered by the served
graph; a module that does not import, is no module, refuses its params or answers the wrong shape stops
before training in one line (exit code 2 from the command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.inference import OnnxModel
from mlops.model import fit_vocabularies
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training.checkpoint import CheckpointStore, PreemptionFlag, TrainingPreempted
from pipelines.training.entry import main, run_training
from pipelines.training.export import export_and_check
from pipelines.training.families.bundled import LoopFamily, family_for
from pipelines.training.families.models import FittedTorch, load_fitted
from pipelines.training.families.torch_net import UserNetwork
from pipelines.training.trained_model import read_summary
from pipelines.training.trainer import Checkpointing, TrainParams, train_model

Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
WIDE = {"module": "user_nets:Wide", "hidden": 16}


def _settings(params: dict[str, Any]) -> PipelineSettings:
    return PipelineSettings(model_family="torch", model_params=params, device="cpu", max_epochs=3, patience=2)


@pytest.mark.integration
def test_a_user_module_trains_exports_with_parity_and_the_served_graph_answers(
        data_dir: Path, splits: Splits, contract: DataContract, tmp_path: Path) -> None:
    settings = _settings(WIDE)
    outcome = run_training(split_paths(data_dir), tmp_path / "model", str(tmp_path / "checkpoints"),
                           settings=settings)
    summary = read_summary(tmp_path / "model")
    assert (summary.family, summary.epochs_run) == ("torch", 3)
    assert outcome.result is not None
    assert outcome.result.stop_reason == "max_epochs"
    fitted = load_fitted(tmp_path / "model", contract)
    assert isinstance(fitted, FittedTorch)
    assert isinstance(fitted.trained.model, UserNetwork)
    assert (fitted.module, fitted.params) == ("user_nets:Wide", {"hidden": 16})
    test = splits[2]
    export = export_and_check(fitted, contract, test, tmp_path / "onnx", settings.parity_tolerance, {})
    assert export.max_abs_diff <= settings.parity_tolerance
    served = OnnxModel(export.onnx_path)
    assert served.metadata["model_family"] == "torch"
    answered = served.predict_proba(test).astype(np.float64)
    np.testing.assert_allclose(answered, fitted.probability(test), atol=settings.parity_tolerance)
    from sklearn.metrics import roc_auc_score

    # Three epochs on 2,100 rows: the network learns (0.74 measured), it does not converge.
    assert roc_auc_score(test[contract.label_column], answered) > 0.65


@pytest.mark.integration
def test_the_module_and_its_params_decide_the_fingerprint(data_dir: Path, tmp_path: Path) -> None:
    """Another hidden width is another training: its checkpoints are not resumed into this one."""
    fingerprints = set()
    for hidden in (8, 16):
        settings = _settings({"module": "user_nets:Wide", "hidden": hidden}).model_copy(update={"max_epochs": 1})
        outcome = run_training(split_paths(data_dir), tmp_path / str(hidden), str(tmp_path / "ckpt"), settings=settings)
        fingerprints.add(outcome.fingerprint)
    assert len(fingerprints) == 2


@pytest.mark.parametrize(("params", "message"), [
    ({"module": "user_nets:Nope"}, "torch module 'user_nets:Nope' does not import"),
    ({"module": "no_such_package.nets:Wide"}, "torch module 'no_such_package.nets:Wide' does not import"),
    ({"module": "user_nets:NotAModule"}, "'user_nets:NotAModule' is not a torch.nn.Module subclass"),
    ({"module": "user_nets:Wide", "depth": 3}, "'user_nets:Wide' refused its params {'depth': 3}: .*depth"),
    ({"module": "user_nets:TwoLogits"}, r"'user_nets:TwoLogits' answers \(2, 2\) for 2 rows"),
    ({"hidden": 3}, "the torch family needs its module in MLOPS_MODEL_PARAMS"),
])
@pytest.mark.unit
def test_a_bad_module_fails_before_training_in_one_line(
        params: dict[str, Any], message: str, data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        run_training(split_paths(data_dir), tmp_path / "model", str(tmp_path / "checkpoints"),
                     settings=_settings(params))
    assert "\n" not in str(caught.value)
    assert caught.value.exit_code == 2
    assert not (tmp_path / "model").exists()
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.unit
def test_the_training_command_exits_2_with_one_line(
        data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "torch")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"module": "user_nets:Nope"}')
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    code = main(["--data-dir", str(data_dir), "--out-dir", str(tmp_path / "model")])
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: torch module 'user_nets:Nope' does not import")


@pytest.mark.integration
def test_a_preempted_user_module_resumes_to_the_same_weights(
        splits: Splits, contract: DataContract, tmp_path: Path) -> None:
    """The loop's SIGTERM checkpoint (the flag the signal sets, set here) holds the user's module too: the
    rerun resumes it, bit for bit on the CPU."""
    settings = _settings({"module": "user_nets:Wide", "hidden": 8}).model_copy(update={"max_epochs": 2})
    params = TrainParams.from_settings(settings)
    family = family_for(settings)
    assert isinstance(family, LoopFamily)
    network = family.network_builder(contract, fit_vocabularies(contract))
    straight = train_model(splits[0], splits[1], contract, params, network=network)

    store = CheckpointStore(str(tmp_path / "checkpoints"))
    with pytest.raises(TrainingPreempted):
        train_model(splits[0], splits[1], contract, params, network=network,
                    checkpointing=Checkpointing(store, "f" * 64, preemption=PreemptionFlag(requested=True)))
    checkpoint = store.latest()
    assert checkpoint is not None
    assert checkpoint["progress"]["global_step"] == 1  # stopped after its first step, the rest is the rerun's
    resumed = train_model(splits[0], splits[1], contract, params, network=network,
                          checkpointing=Checkpointing(store, "f" * 64))
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
