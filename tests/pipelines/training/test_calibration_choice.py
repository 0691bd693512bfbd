"""Calibration as a choice (issue 40, point 3): on scores whose true calibration is a known curve, the
choice by out-of-fold log loss picks the map that fits it, and the ONNX map answers as the numpy one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper
from threadpoolctl import threadpool_limits

from mlops import registry
from mlops.calibration import top_decile_ece
from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.inference import OnnxModel
from mlops.registry_client import activate
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training.calibrators import Calibrator, choose_calibration, fit_method
from pipelines.training.entry import run_training
from pipelines.training.export import export_and_check
from pipelines.training.families.bundled import family_for
from pipelines.training.families.models import load_fitted
from pipelines.training.family_training import train_family

ROWS = 20_000


def _scores(true_probability: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    labels = (np.random.default_rng(seed).random(len(true_probability)) < true_probability).astype(np.int64)
    return labels, true_probability


def _logits(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(-3.0, 2.0, ROWS)


@pytest.mark.unit
def test_a_step_shaped_truth_picks_isotonic() -> None:
    """The truth is monotone but no sigmoid of the logit (a plateau, then a jump): isotonic fits it."""
    z = _logits()
    truth = np.where(z < -2.0, 0.01, np.where(z < 0.0, 0.3, 0.9))
    labels, _ = _scores(truth)
    choice = choose_calibration(z, labels, "auto", seed=7)
    assert choice.method == "isotonic"
    assert choice.log_loss["isotonic"] < choice.log_loss["platt"] < choice.log_loss["none"]
    assert choice.val_top_decile_ece < 0.02


@pytest.mark.unit
def test_a_sigmoid_shaped_truth_beats_none() -> None:
    """A class-weighted score: sigmoid(0.7 z - 2) is the truth. Platt or isotonic, well below none."""
    z = _logits()
    labels, _ = _scores(1 / (1 + np.exp(-(0.7 * z - 2.0))))
    choice = choose_calibration(z, labels, "auto", seed=7)
    assert choice.method in ("platt", "isotonic")
    assert choice.log_loss[choice.method] < choice.log_loss["none"] - 0.01
    platt = fit_method("platt", z, labels).platt
    assert platt == pytest.approx((0.7, -2.0), abs=0.1)


@pytest.mark.unit
def test_a_forced_method_is_fitted_without_choosing() -> None:
    z = _logits()
    labels, _ = _scores(1 / (1 + np.exp(-z)))
    choice = choose_calibration(z, labels, "none", seed=7)
    assert (choice.method, choice.log_loss) == ("none", {})
    with pytest.raises(ConfigError, match="unknown calibration 'beta'"):
        choose_calibration(z, labels, "beta", seed=7)


def _onnx_map(calibrator: Calibrator, logits: np.ndarray) -> np.ndarray:
    nodes, constants = calibrator.onnx_nodes("logit", "probability")
    graph = helper.make_graph(nodes, "calibration", [helper.make_tensor_value_info("logit", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("probability", TensorProto.FLOAT, ["n"])],
                              initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"logit": logits.astype(np.float32)})[0], dtype=np.float64)


@pytest.mark.unit
@pytest.mark.parametrize("method", ["isotonic", "platt", "none"])
def test_the_onnx_map_equals_the_numpy_map(method: str) -> None:
    """On the fitted map's own knots, between them and far beyond both ends, to float32 rounding."""
    z = _logits()
    labels, _ = _scores(np.where(z < -1.0, 0.02, 0.5))
    calibrator = fit_method(method, z, labels)  # type: ignore[arg-type]
    probes = np.concatenate([z, np.asarray(calibrator.knots[0]), [-1e4, -50.0, 50.0, 1e4]]).astype(np.float32)
    expected = calibrator.apply(probes.astype(np.float64))
    np.testing.assert_allclose(_onnx_map(calibrator, probes), expected, atol=1e-6, rtol=0)
    assert Calibrator.from_dict(json.loads(json.dumps(calibrator.to_dict()))) == calibrator


@pytest.mark.unit
def test_a_constant_isotonic_map_still_has_a_segment() -> None:
    z = _logits()[:200]
    calibrator = fit_method("isotonic", z, np.zeros(200, dtype=np.int64))
    assert len(calibrator.knots[0]) == 2
    np.testing.assert_allclose(_onnx_map(calibrator, z), 0.0, atol=1e-7)


@pytest.mark.unit
def test_top_decile_ece_looks_at_the_highest_scores_only() -> None:
    """Right on average, off by 0.2 at the top: the top-decile ECE sees it."""
    proba = np.linspace(0.0, 1.0, 1000)
    labels = (np.random.default_rng(3).random(1000) < np.where(proba >= 0.9, proba - 0.2, proba)).astype(int)
    assert top_decile_ece(labels, proba) == pytest.approx(0.2, abs=0.06)
    # Ties at a plateau (an isotonic map's) leave the top tenth a tenth of the rows.
    plateau = np.where(proba >= 0.9, 0.9, 0.01)
    assert top_decile_ece(labels, plateau) == pytest.approx(abs(0.9 - labels[proba >= 0.9].mean()), abs=1e-9)


@pytest.mark.integration
def test_a_family_logs_its_chosen_calibration_and_serves_it(
        settings: PipelineSettings, data_dir: Path, contract: DataContract, tmp_path: Path) -> None:
    """A forced isotonic map on an xgboost model: in the served graph within the family's parity rule, and
    the method with its validation ECE and top-decile ECE in the run."""
    settings = settings.model_copy(update={"model_family": "xgboost", "model_params": {"n_estimators": 20},
                                           "device": "cpu", "calibration": "isotonic"})
    client = registry.client(settings)
    run_id = client.create_run(registry.ensure_experiment(settings)).info.run_id
    paths = split_paths(data_dir)
    activate(settings)  # the train step's logging goes through MLflow's global URIs
    with threadpool_limits(limits=1):
        outcome = train_family(family_for(settings), paths, tmp_path / "model", contract, settings,
                               {name: "0" for name in paths}, run_id)
        export = export_and_check(outcome.fitted, contract, pd.read_parquet(paths["test"]), tmp_path / "onnx",
                                  settings.parity_tolerance, {})
    assert export.max_abs_diff < 1e-5
    run = client.get_run(run_id)
    assert (run.data.params["calibration"], run.data.params["calibration_setting"]) == ("isotonic", "isotonic")
    assert 0.0 <= run.data.metrics["val_ece"] < 0.05
    assert 0.0 <= run.data.metrics["val_top_decile_ece"] < 1.0


@pytest.mark.integration
@pytest.mark.parametrize(("family", "params"), [("mlp", {}), ("torch", {"module": "user_nets:Wide", "hidden": 8})])
def test_the_platform_loop_serves_an_isotonic_map_after_the_networks_logit(
        family: str, params: dict[str, object], settings: PipelineSettings, data_dir: Path, contract: DataContract,
        tmp_path: Path) -> None:
    """The MLP and a user's module: the map as ONNX nodes after the torch graph's logit, within the MLP's
    parity tolerance; the run records the method."""
    settings = settings.model_copy(update={"model_family": family, "model_params": params, "device": "cpu",
                                           "max_epochs": 2, "calibration": "isotonic"})
    client = registry.client(settings)
    run_id = client.create_run(registry.ensure_experiment(settings)).info.run_id
    paths = split_paths(data_dir)
    outcome = run_training(paths, tmp_path / "model", str(tmp_path / "checkpoints"), run_id=run_id,
                           settings=settings)
    assert outcome.result is not None
    assert outcome.result.calibration.method == "isotonic"
    fitted = load_fitted(tmp_path / "model", contract)
    test = pd.read_parquet(paths["test"])
    export = export_and_check(fitted, contract, test, tmp_path / "onnx", settings.parity_tolerance, {})
    assert export.max_abs_diff <= settings.parity_tolerance
    served = OnnxModel(export.onnx_path).predict_proba(test).astype(np.float64)
    np.testing.assert_allclose(served, fitted.probability(test), atol=settings.parity_tolerance)
    run = client.get_run(run_id)
    assert (run.data.params["model_family"], run.data.params["calibration"]) == (family, "isotonic")
    assert {"val_ece", "val_top_decile_ece"} <= set(run.data.metrics)
