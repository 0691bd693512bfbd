"""Train step: reproducible training with early stopping and calibration, export + parity, MLflow logging."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from pydantic import ValidationError
from sklearn.metrics import roc_auc_score

from mlops.contract import DataContract
from mlops.errors import TrainingError
from mlops.inference import OnnxModel
from mlops.model import encode
from pipelines.settings import PipelineSettings
from pipelines.training.export import ExportResult, export_and_check, log_model_to_mlflow
from pipelines.training.thresholds import best_f1_threshold
from pipelines.training.tracking import log_training, params_from_run
from pipelines.training.trained_model import load_trained, save_trained
from pipelines.training.trainer import EpochMetrics, TrainParams, TrainResult, train_model

Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]

PARAMS = TrainParams.from_settings(
    PipelineSettings(seed=11, max_epochs=12, patience=3, batch_size=256, learning_rate=3e-3, device="cpu")
)


@dataclass(frozen=True)
class Trained:
    """One training run on the shared splits, the epochs its callback saw and the wall time around it."""

    result: TrainResult
    seen: list[EpochMetrics]
    wall_s: float


@pytest.fixture(scope="module")
def trained(splits: Splits, contract: DataContract) -> Trained:
    seen: list[EpochMetrics] = []
    started = time.monotonic()
    result = train_model(splits[0], splits[1], contract, PARAMS, on_epoch=seen.append)
    return Trained(result, seen, time.monotonic() - started)


@pytest.fixture(scope="module")
def exported(
    trained: Trained, splits: Splits, contract: DataContract,
    tmp_path_factory: pytest.TempPathFactory,
) -> ExportResult:
    out = tmp_path_factory.mktemp("train-export")
    return export_and_check(trained.result.trained, contract, splits[2], out, tolerance=1e-5, metadata={"run": "test"})


@pytest.fixture
def tracking_uri(mlflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    uri = f"sqlite:///{mlflow_home / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    yield uri
    mlflow.set_tracking_uri(None)  # type: ignore[arg-type]  # None = unset, the environment decides again


def _scores(result: TrainResult, frame: pd.DataFrame, contract: DataContract) -> np.ndarray:
    return result.model.predict_proba(*encode(frame, contract, result.vocabs))


@pytest.mark.unit
def test_params_come_from_settings() -> None:
    params = TrainParams.from_settings(PipelineSettings(seed=5, max_epochs=3, device="cpu"))
    assert (params.seed, params.max_epochs, params.device) == (5, 3, "cpu")
    assert params.batch_size == PipelineSettings().batch_size
    assert params.hidden_sizes == PipelineSettings().hidden_sizes
    with pytest.raises(ValidationError):
        TrainParams.model_validate({"seed": 1, "epochs": 3})


@pytest.mark.integration
def test_training_keeps_the_best_epoch_and_stops_patience_epochs_after_it(trained: Trained, splits: Splits) -> None:
    result, seen = trained.result, trained.seen
    assert result.rows_per_epoch == len(splits[0])  # no downsampling by default
    assert seen == result.history
    assert [m.epoch for m in result.history] == list(range(1, len(result.history) + 1))
    pr_aucs = [m.val_pr_auc for m in result.history]
    assert result.best_epoch == int(np.argmax(pr_aucs)) + 1
    assert result.best.val_pr_auc == max(pr_aucs)
    stopped_early = len(result.history) < PARAMS.max_epochs
    assert not stopped_early or len(result.history) - result.best_epoch == PARAMS.patience
    assert result.stop_reason == ("early_stopping" if stopped_early else "max_epochs")
    # The run's training time is the wall clock of its epochs: within the time around the call.
    assert 0 < result.seconds <= trained.wall_s
    assert result.device == "cpu"
    assert not result.model.training
    assert result.precision == "fp32"
    assert [s.epoch for s in result.system] == [m.epoch for m in result.history]
    assert all(s.gpu_utilization_percent is None for s in result.system)
    # Each epoch's throughput counts rows, not batches: the epochs' rows at those rates fit in the run's time.
    assert sum(result.rows_per_epoch / s.samples_per_s for s in result.system) <= result.seconds


@pytest.mark.integration
def test_threshold_is_chosen_on_calibrated_validation_scores(
    trained: Trained, splits: Splits, contract: DataContract
) -> None:
    result = trained.result
    val = splits[1]
    # The served probability is the calibrated one, so the cut-off must be chosen on it, on validation.
    expected = best_f1_threshold(val[contract.label_column].to_numpy(), _scores(result, val, contract))
    assert result.threshold == expected


@pytest.mark.integration
def test_calibration_lowers_validation_ece(trained: Trained) -> None:
    result = trained.result
    # Class weights inflate raw scores; Platt scaling on validation brings them back to the fraud rate.
    assert result.val_calibrated.ece < result.val_uncalibrated.ece
    assert result.val_calibrated.brier < result.val_uncalibrated.brier
    scale, bias = result.model.calibration.tolist()
    assert (scale, bias) != (1.0, 0.0)


@pytest.mark.integration
def test_model_beats_random(
    trained: Trained, splits: Splits, contract: DataContract
) -> None:
    result = trained.result
    val = splits[1]
    probs = _scores(result, val, contract)
    assert roc_auc_score(val[contract.label_column], probs) > 0.8
    # The restored weights are the best epoch's, not the last epoch's.
    assert roc_auc_score(val[contract.label_column], probs) == pytest.approx(result.best.val_roc_auc)


@pytest.mark.integration
def test_same_seed_same_model(
    trained: Trained, splits: Splits, contract: DataContract
) -> None:
    first = trained.result
    again = train_model(splits[0], splits[1], contract, PARAMS)
    assert again.history == first.history
    assert again.threshold == first.threshold
    np.testing.assert_array_equal(_scores(again, splits[2], contract), _scores(first, splits[2], contract))


@pytest.mark.unit
@pytest.mark.parametrize("label", [0, 1])
def test_single_class_labels_fail_clearly(label: int, splits: Splits, contract: DataContract) -> None:
    train = splits[0].assign(**{contract.label_column: label})
    with pytest.raises(TrainingError, match="train labels are all"):
        train_model(train, splits[1], contract, PARAMS)


@pytest.mark.unit
def test_missing_feature_values_fail_clearly(splits: Splits, contract: DataContract) -> None:
    train = splits[0].copy()
    train.loc[train.index[3], "customer_amount_mean_7d"] = np.nan
    with pytest.raises(TrainingError, match="customer_amount_mean_7d"):
        train_model(train, splits[1], contract, PARAMS)


@pytest.mark.integration
def test_bf16_autocast_trains_on_cpu(
    trained: Trained, splits: Splits, contract: DataContract
) -> None:
    params = PARAMS.model_copy(update={"precision": "bf16", "max_epochs": 2})
    result = train_model(splits[0], splits[1], contract, params)
    assert result.precision == "bf16"
    fp32_loss, bf16_loss = trained.result.history[0].train_loss, result.history[0].train_loss
    # Same seed and batches: only the lower precision of the forward pass moves the first epoch's loss.
    assert bf16_loss != fp32_loss
    assert bf16_loss == pytest.approx(fp32_loss, rel=0.05)
    assert roc_auc_score(splits[1][contract.label_column], _scores(result, splits[1], contract)) > 0.7


@pytest.mark.integration
def test_export_and_check_keeps_parity_and_threshold(
    trained: Trained, exported: ExportResult, splits: Splits,
    contract: DataContract,
) -> None:
    result = trained.result
    assert exported.max_abs_diff <= 1e-5
    scorer = OnnxModel(exported.onnx_path)
    assert scorer.threshold == result.threshold
    assert scorer.metadata["run"] == "test"
    expected = _scores(result, splits[2], contract)
    np.testing.assert_allclose(scorer.predict_proba(splits[2]), expected, atol=1e-5)


@pytest.mark.integration
def test_log_training_records_inputs_and_model(
    tracking_uri: str, tmp_path: Path, trained: Trained,
    exported: ExportResult, splits: Splits, data_dir: Path,
) -> None:
    result = trained.result
    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment("train-test", artifact_location=(tmp_path / "artifacts").as_uri())
    run_id = client.create_run(experiment).info.run_id
    paths = {name: data_dir / f"{name}.parquet" for name in ("train", "validation", "test")}

    log_training(run_id, PARAMS, result, fingerprint="f" * 64, data=paths,
                 data_sha256={"train": "t1", "validation": "v1", "test": "s1"})
    uri = log_model_to_mlflow(run_id, exported)

    run = client.get_run(run_id)
    assert params_from_run(run.data.params) == PARAMS  # the architecture and optimiser settings round-trip
    assert run.data.params["train_sha256"] == "t1"
    assert run.data.params["training_fingerprint"] == "f" * 64
    assert run.data.params["version_torch"] == metadata.version("torch")  # the installed torch, not a guess
    assert run.data.params["deterministic_algorithms"] == "true"
    assert run.data.params["stop_reason"] == result.stop_reason
    assert run.data.params["train.negative_sample_rate"] == "1.0"
    assert run.data.params["negative_loss_weight"] == "1.0"
    assert run.data.params["negative_sample_rate_used"] == "1.0"
    assert run.data.metrics["train_rows_per_epoch"] == result.rows_per_epoch
    history = client.get_metric_history(run_id, "val_pr_auc")
    assert [m.step for m in history] == [m.epoch for m in result.history]
    assert len(client.get_metric_history(run_id, "system/train_samples_per_s")) == len(result.history)
    assert run.data.metrics["decision_threshold"] == pytest.approx(result.threshold)
    assert run.data.metrics["best_epoch"] == result.best_epoch
    assert run.data.metrics["val_ece"] < run.data.metrics["val_ece_uncalibrated"]
    assert run.data.tags["onnx_sha256"] == exported.sha256
    logged_data = {a.path for a in client.list_artifacts(run_id, "training_data")}
    assert logged_data == {f"training_data/{n}.parquet" for n in ("train", "validation", "test")}

    local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "download")))
    [onnx_file] = local.glob("*.onnx")
    logged = OnnxModel(onnx_file)
    assert logged.threshold == result.threshold
    np.testing.assert_array_equal(
        logged.predict_proba(splits[2]), OnnxModel(exported.onnx_path).predict_proba(splits[2])
    )


@pytest.mark.integration
def test_trained_model_file_round_trips(
    trained: Trained, splits: Splits, contract: DataContract, tmp_path: Path
) -> None:
    result = trained.result
    path = save_trained(tmp_path / "model.pt", result.model, result.vocabs, result.threshold,
                        PARAMS.hidden_sizes, PARAMS.dropout)
    loaded = load_trained(path, contract)
    assert loaded.threshold == result.threshold
    np.testing.assert_array_equal(loaded.model.predict_proba(*encode(splits[2], contract, loaded.vocabs)),
                                  _scores(result, splits[2], contract))


@pytest.mark.integration
def test_architecture_comes_from_settings(splits: Splits, contract: DataContract) -> None:
    params = PARAMS.model_copy(update={"hidden_sizes": (16,), "max_epochs": 1, "dropout": 0.0})
    result = train_model(splits[0], splits[1], contract, params)
    linears = [m for m in result.model.mlp if hasattr(m, "out_features")]
    assert [m.out_features for m in linears] == [16, 1]


@pytest.fixture(scope="module")
def downsampled(splits: Splits, contract: DataContract) -> TrainResult:
    params = PARAMS.model_copy(update={"negative_sample_rate": 0.25, "max_epochs": 6, "patience": 6})
    return train_model(splits[0], splits[1], contract, params)


@pytest.mark.integration
def test_negative_downsampling_trains_on_every_fraud_and_a_share_of_the_rest(
    downsampled: TrainResult, splits: Splits, contract: DataContract
) -> None:
    labels = splits[0][contract.label_column]
    positives, negatives = int(labels.sum()), int((labels == 0).sum())
    sampled = downsampled.rows_per_epoch - positives
    assert abs(sampled - 0.25 * negatives) <= 5 * (negatives * 0.25 * 0.75) ** 0.5
    val = splits[1]
    assert roc_auc_score(val[contract.label_column], _scores(downsampled, val, contract)) > 0.8
    assert downsampled.val_calibrated.ece < downsampled.val_uncalibrated.ece


@pytest.mark.integration
def test_epoch_row_cap_keeps_every_positive_and_samples_the_negatives_down_to_it(
    splits: Splits, contract: DataContract
) -> None:
    labels = splits[0][contract.label_column]
    positives, negatives = int(labels.sum()), int((labels == 0).sum())
    cap = (positives + negatives) // 3
    params = PARAMS.model_copy(update={"max_epoch_rows": cap, "max_epochs": 4, "patience": 4})
    result = train_model(splits[0], splits[1], contract, params)
    assert result.negative_sample_rate == pytest.approx((cap - positives) / negatives)
    sampled = result.rows_per_epoch - positives
    rate = result.negative_sample_rate
    assert abs(sampled - rate * negatives) <= 5 * (negatives * rate * (1 - rate)) ** 0.5
    val = splits[1]
    assert roc_auc_score(val[contract.label_column], _scores(result, val, contract)) > 0.8
    uncapped = PARAMS.model_copy(update={"max_epoch_rows": positives + negatives, "max_epochs": 1})
    assert train_model(splits[0], splits[1], contract, uncapped).rows_per_epoch == positives + negatives


@pytest.mark.integration
def test_time_budget_stops_training_and_keeps_a_calibrated_model(splits: Splits, contract: DataContract) -> None:
    params = PARAMS.model_copy(update={"max_epochs": 500, "patience": 500, "max_train_seconds": 0.05})
    result = train_model(splits[0], splits[1], contract, params)
    assert result.stop_reason == "time_budget"
    assert len(result.history) < 500
    assert result.seconds >= 0.05
    assert result.best_epoch in range(1, len(result.history) + 1)
    assert result.val_calibrated.ece < result.val_uncalibrated.ece
