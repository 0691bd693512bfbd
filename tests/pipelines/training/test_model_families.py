"""Model families (issue 40): each family fits the shared small splits, goes through the train step's
files and the export step's graph, and the served graph answers like the fitted model within the
family's stated tolerance, with the MLP graph's inputs and output; the failures are one clear line."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
import pandas as pd
import pytest
import torch
from threadpoolctl import threadpool_limits

from mlops import registry
from mlops.contract import DataContract
from mlops.errors import ConfigError, InputError, UnconvertibleModelError
from mlops.inference import OnnxModel
from mlops.onnx_export import OUTPUT_NAME
from mlops.triton_export import model_config
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training.command import recorded_inputs
from pipelines.training.entry import run_training
from pipelines.training.export import ExportResult, export_and_check
from pipelines.training.families.bundled import family_for
from pipelines.training.families.converted import MAX_DISAGREEING_SHARE, TREE_TOLERANCE
from pipelines.training.families.models import FittedModel, load_fitted
from pipelines.training.families.xgb import _device
from pipelines.training.families.xgb_model import FittedXGBoost
from pipelines.training.family_training import plot_importance
from pipelines.training.search import search
from pipelines.training.trained_model import read_summary

pytestmark = pytest.mark.unit

Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]

# Small enough for a unit test on two cores; each family's defaults otherwise.
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "xgboost": ("xgboost", {"n_estimators": 60}),
    "hist_gradient_boosting": ("sklearn", {"estimator": "sklearn.ensemble.HistGradientBoostingClassifier",
                                           "max_iter": 30}),
    "logistic_pipeline": ("sklearn", {"estimator": "own_estimators:scaled_logistic", "c": 0.5}),
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """XGBoost's and scikit-learn's OpenMP threads spin on a busy machine (make test runs a worker per
    core): 43 boosting rounds on 2,100 rows took 14 s beside another test run, 0.17 s on one thread."""
    with threadpool_limits(limits=1):
        yield


@dataclass(frozen=True)
class Exported:
    family: str
    out_dir: Path
    fitted: FittedModel  # as the export step loads it from the train step's files
    export: ExportResult


@pytest.fixture(scope="module", params=list(FAMILIES))
def exported(request: pytest.FixtureRequest, splits: Splits, data_dir: Path, contract: DataContract,
             tmp_path_factory: pytest.TempPathFactory) -> Exported:
    """The train step (no MLflow run) and the export step's load + graph + parity, as the pipeline runs them."""
    family, params = FAMILIES[request.param]
    settings = PipelineSettings(model_family=family, model_params=params, device="cpu")
    folder = tmp_path_factory.mktemp(request.param)
    out_dir = folder / "model"
    run_training(split_paths(data_dir), out_dir, str(folder / "checkpoints"), settings=settings)
    fitted = load_fitted(out_dir, contract)
    export = export_and_check(fitted, contract, splits[2], folder / "onnx", settings.parity_tolerance, {})
    return Exported(family, out_dir, fitted, export)


def test_the_train_step_records_the_family(exported: Exported) -> None:
    summary = read_summary(exported.out_dir)
    assert summary.family == exported.family
    assert summary.params  # the family's params as it fitted with them
    assert 0.0 < summary.threshold < 1.0


def test_the_served_graph_takes_the_mlp_graphs_inputs_and_answers_its_output(
        exported: Exported, contract: DataContract) -> None:
    model = onnx.load(str(exported.export.onnx_path))
    inputs = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    assert list(inputs) == [*contract.numeric_inputs, *contract.model_inputs.categorical]
    assert {inputs[n] for n in contract.numeric_inputs} == {onnx.TensorProto.FLOAT}
    assert {inputs[n] for n in contract.model_inputs.categorical} == {onnx.TensorProto.STRING}
    [output] = model.graph.output
    assert output.name == OUTPUT_NAME
    assert [d.dim_param for d in output.type.tensor_type.shape.dim] == ["batch"]
    served = OnnxModel(exported.export.onnx_path)
    assert served.metadata["model_family"] == exported.family
    assert served.threshold == pytest.approx(exported.fitted.threshold)


def test_parity_on_the_test_split_within_the_familys_tolerance(exported: Exported, splits: Splits) -> None:
    test = splits[2]
    served = OnnxModel(exported.export.onnx_path).predict_proba(test).astype(np.float64)
    fitted = exported.fitted.probability(test)
    beyond = np.count_nonzero(~(np.abs(served - fitted) <= TREE_TOLERANCE))
    assert beyond <= len(test) * MAX_DISAGREEING_SHARE
    assert exported.export.max_abs_diff <= TREE_TOLERANCE
    threshold = exported.fitted.threshold
    agree = np.mean((served >= threshold) == (fitted >= threshold))
    assert agree >= 0.9999
    assert np.all((served >= 0) & (served <= 1))


def test_the_family_ranks_the_test_split(exported: Exported, splits: Splits, contract: DataContract) -> None:
    from sklearn.metrics import roc_auc_score

    test = splits[2]
    served = OnnxModel(exported.export.onnx_path).predict_proba(test)
    assert roc_auc_score(test[contract.label_column], served) > 0.8


def test_calibration_maps_class_weighted_scores_back_to_the_positive_rate(
        exported: Exported, splits: Splits, contract: DataContract) -> None:
    validation = splits[1]
    calibrated = exported.fitted.probability(validation)
    rate = validation[contract.label_column].mean()
    # Class weights push raw scores up; Platt on validation matches the mean to the positive rate.
    assert abs(calibrated.mean() - rate) < 0.02


def test_an_estimator_skl2onnx_cannot_convert_stops_export_in_one_line(
        splits: Splits, contract: DataContract, tmp_path: Path) -> None:
    settings = PipelineSettings(model_family="sklearn",
                                model_params={"estimator": "sklearn.semi_supervised.LabelSpreading",
                                              "kernel": "knn"})
    fitted, _ = family_for(settings).fit(splits[0], splits[1], contract)
    with pytest.raises(UnconvertibleModelError) as caught:
        export_and_check(fitted, contract, splits[2], tmp_path, 1e-5, {})
    message = str(caught.value)
    assert "\n" not in message
    assert "sklearn.semi_supervised._label_propagation.LabelSpreading" in message
    assert "choose an estimator it converts" in message
    assert caught.value.exit_code == 2
    assert not (tmp_path / "model.onnx").exists()


def test_an_unknown_family_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown model family 'lightgbm'; registered: mlp, sklearn, torch, xgboost"):
        family_for(PipelineSettings(model_family="lightgbm"))


@pytest.mark.parametrize(("params", "message"), [
    ({"estimator": "sklearn.ensemble.NoSuchForest"}, "'sklearn.ensemble.NoSuchForest' does not import"),
    ({"estimator": "sklearn.svm.LinearSVC"}, "LinearSVC has no predict_proba"),
    ({"estimator": "sklearn.linear_model.LogisticRegression", "no_such_param": 1}, "no_such_param"),
    ({"estimator": "sklearn.linear_model.LogisticRegression", "C": -1.0},
     "LogisticRegression did not fit: The 'C' parameter of LogisticRegression must be"),
])
def test_a_bad_sklearn_estimator_fails_in_one_line(
        params: dict[str, Any], message: str, splits: Splits, contract: DataContract) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        family_for(PipelineSettings(model_family="sklearn", model_params=params)).fit(splits[0], splits[1], contract)
    assert "\n" not in str(caught.value)


def test_settings_choose_the_family_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "xgboost")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"max_depth": 4}')
    settings = PipelineSettings()
    family = family_for(settings)
    assert family.name == "xgboost"
    assert family.params["max_depth"] == 4
    assert PipelineSettings.model_fields["model_family"].default == "mlp"


def test_xgboost_trains_on_the_gpu_torch_sees_else_on_the_cpu() -> None:
    assert _device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert _device("cpu") == "cpu"


def test_the_frames_the_family_reads_need_only_the_models_inputs(
        splits: Splits, contract: DataContract) -> None:
    columns = [*contract.numeric_inputs, *contract.model_inputs.categorical, contract.label_column]
    train, validation = (frame[columns].reset_index(drop=True) for frame in splits[:2])
    settings = PipelineSettings(model_family="xgboost", model_params={"n_estimators": 10}, device="cpu")
    fitted, summary = family_for(settings).fit(train, validation, contract)
    assert summary.rounds_run <= 10
    assert fitted.probability(pd.DataFrame(splits[2][columns])).shape == (len(splits[2]),)


def test_a_data_scientists_xgboost_params_override_the_platforms_choices(
        splits: Splits, contract: DataContract) -> None:
    settings = PipelineSettings(model_family="xgboost", device="cpu",
                                model_params={"n_estimators": 5, "scale_pos_weight": 1.0, "max_depth": 2})
    fitted, _ = family_for(settings).fit(splits[0], splits[1], contract)
    chosen = cast(FittedXGBoost, fitted).model.get_params()
    assert (chosen["scale_pos_weight"], chosen["max_depth"], chosen["tree_method"]) == (1.0, 2, "hist")


def test_batch_scoring_and_the_triton_config_read_a_family_graph_as_the_mlps(
        exported: Exported, splits: Splits, contract: DataContract) -> None:
    test = splits[2]
    served = OnnxModel(exported.export.onnx_path)
    columns = {name: test[name].tolist() for name in served.input_names}
    np.testing.assert_array_equal(served.predict_columns(columns), served.predict_proba(test))
    config = model_config("family", onnx.load(str(exported.export.onnx_path)), max_batch_size=8, queue_delay_us=10)
    assert f'name: "{OUTPUT_NAME}"' in config
    assert all(f'name: "{name}"' in config for name in served.input_names)


def test_search_refuses_an_estimator_it_has_no_space_for_before_reading_anything() -> None:
    settings = PipelineSettings(model_family="sklearn", model_params={"estimator": "own_estimators:scaled_logistic"})
    with pytest.raises(ConfigError, match="--search has no space for the sklearn estimator"):
        search({}, 3, settings, parent_run_id="unused")


def test_reproducing_a_run_of_a_users_torch_module_is_refused_in_one_line(
        settings: PipelineSettings, tmp_path: Path) -> None:
    client = registry.client(settings)
    run_id = client.create_run(registry.ensure_experiment(settings)).info.run_id
    client.log_param(run_id, "model_family", "torch")
    with pytest.raises(ConfigError, match=f"run {run_id} trained the torch family; --reproduce reruns mlp runs"):
        recorded_inputs(settings, run_id, tmp_path)


def test_a_family_run_from_before_it_recorded_its_seed_is_named(settings: PipelineSettings, tmp_path: Path) -> None:
    client = registry.client(settings)
    run_id = client.create_run(registry.ensure_experiment(settings)).info.run_id
    client.log_param(run_id, "model_family", "xgboost")
    with pytest.raises(InputError, match=f"run {run_id} did not record its seed"):
        recorded_inputs(settings, run_id, tmp_path)


def test_trees_report_feature_importance_by_input_and_draw_it(
        exported: Exported, contract: DataContract, tmp_path: Path) -> None:
    importance = exported.fitted.feature_importance(contract)
    if exported.family != "xgboost":  # HistGradientBoosting and a Pipeline have no importance of their own
        assert importance == {}
        return
    assert list(importance) == [*contract.numeric_inputs, *contract.model_inputs.categorical]
    assert max(importance.values()) > 0
    plot_importance(importance, tmp_path / "importance.png", "xgboost")
    assert (tmp_path / "importance.png").read_bytes().startswith(b"\x89PNG")


def test_a_row_scored_alone_gets_the_score_it_gets_in_a_batch(exported: Exported, splits: Splits) -> None:
    # The service scores a request alone, `mlops predict` a file at once: ONNX Runtime may round a
    # classifier's float32 probability one ulp apart between the two, which the logit of a probability
    # near 1 once turned into 2.6e-4 on the calibrated score. The graph calibrates the margin instead.
    test = splits[2]
    served = OnnxModel(exported.export.onnx_path)
    batch = served.predict_proba(test).astype(np.float64)
    alone = np.array([served.predict_proba(test.iloc[[n]])[0] for n in range(len(test))], dtype=np.float64)
    assert np.abs(batch - alone).max() <= 1e-6
