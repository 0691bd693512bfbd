"""What rank 0 records in MLflow about a training run: enough to judge it and to re-run it.

Params: every training setting (architecture and optimiser included), seeds, determinism, world
size, dataset hashes, the training fingerprint, git commit and library versions. Metrics: per-epoch
history, throughput and GPU load (``system/``), calibration on validation. Artifacts: the split
files themselves (``training_data/``), which ``mlops train --reproduce`` reads back.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from pipelines.provenance import git_commit, library_versions
from pipelines.steps.calibration import plot_reliability
from pipelines.training.trainer import EPOCH_KEYS, TrainParams, TrainResult

TRAINING_DATA_ARTIFACTS = "training_data"
PARAMS_PREFIX = "train."  # the TrainParams fields, as `mlops train --reproduce` reads them back


def params_to_log(params: TrainParams) -> dict[str, str]:
    return {f"{PARAMS_PREFIX}{k}": json.dumps(v) for k, v in params.model_dump(mode="json").items()}


def params_from_run(logged: dict[str, str]) -> TrainParams:
    return TrainParams.model_validate({k.removeprefix(PARAMS_PREFIX): json.loads(v) for k, v in logged.items()
                                       if k.startswith(PARAMS_PREFIX)})


def log_training(run_id: str, params: TrainParams, result: TrainResult, *, fingerprint: str,
                 data: dict[str, Path], data_sha256: dict[str, str], family: str = "mlp",
                 family_params: dict[str, Any] | None = None) -> None:
    """``family_params``: a family's own params beyond the loop's settings (a user's module), logged as the
    in-process families log theirs; the MLP has none."""
    client = MlflowClient()
    now_ms = int(time.time() * 1000)
    logged = {
        **params_to_log(params),
        "model_family": family,
        "seeds": "python random, numpy, torch (CPU and CUDA) = seed; torch dropout RNG = seed + rank",
        "deterministic_algorithms": "true",
        "optimizer": "adam",
        "lr_scheduler": "reduce_on_plateau(max val PR-AUC, factor 0.5)",
        "model_architecture": (f"TabularMLP(hidden={list(params.hidden_sizes)}, dropout={params.dropout})"
                               if family_params is None else str(family_params.get("module"))),
        "world_size": str(result.world_size),
        "device_used": result.device,
        "precision_used": result.precision,
        "epochs_run": str(len(result.history)),
        "stop_reason": result.stop_reason,
        "calibration": result.calibration.method,
        "calibration_setting": result.calibration.setting,
        # Negative downsampling: each epoch's share of the negatives (the configured rate, or lower where
        # max_epoch_rows caps an epoch) and the loss weight that undoes it.
        "negative_sample_rate_used": str(result.negative_sample_rate),
        "negative_loss_weight": str(1.0 / result.negative_sample_rate),
        "training_fingerprint": fingerprint,
        "train_git_commit": git_commit(),  # ingest records its own; the code may have moved since
        **{f"{name}_sha256": digest for name, digest in data_sha256.items()},
        **{f"version_{name}": version for name, version in library_versions().items()},
    }
    if family_params is not None:
        logged["model_params"] = json.dumps(family_params, sort_keys=True, default=str)
        logged.update({f"family.{k}": json.dumps(v, default=str) for k, v in family_params.items()})
    metrics = [Metric(key=key, value=getattr(m, key), timestamp=now_ms, step=m.epoch)
               for m in result.history for key in EPOCH_KEYS]
    metrics += [Metric(key=key, value=value, timestamp=now_ms, step=s.epoch)
                for s in result.system for key, value in s.as_metrics().items()]
    best = result.best
    scale, bias = (float(v) for v in result.model.calibration)
    summary = {
        **{f"best_{key}": float(getattr(best, key)) for key in EPOCH_KEYS},
        "best_epoch": float(result.best_epoch),
        "train_seconds": result.seconds,
        "train_rows_per_epoch": float(result.rows_per_epoch),
        "decision_threshold": result.threshold,
        "calibration_scale": scale,
        "calibration_bias": bias,
        "val_brier_uncalibrated": result.val_uncalibrated.brier,
        "val_ece_uncalibrated": result.val_uncalibrated.ece,
        "val_brier": result.val_calibrated.brier,
        "val_ece": result.val_calibrated.ece,
        **result.calibration.metrics(),  # the top-decile ECE and each method's out-of-fold log loss
    }
    metrics += [Metric(key=k, value=v, timestamp=now_ms, step=0) for k, v in summary.items()]
    # One call for all metrics and params: a round trip per value is slow against a remote server.
    client.log_batch(run_id, metrics=metrics, params=[Param(k, v) for k, v in logged.items()])
    for path in data.values():
        client.log_artifact(run_id, str(path), TRAINING_DATA_ARTIFACTS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, report in (("uncalibrated", result.val_uncalibrated), ("calibrated", result.val_calibrated)):
            (folder / f"val_reliability_{name}.json").write_text(report.model_dump_json(indent=2))
            plot_reliability(report, folder / f"val_reliability_{name}.png", f"Validation, {name}",
                             threshold=result.threshold if name == "calibrated" else None)
        client.log_artifacts(run_id, str(folder), "calibration")
    client.set_tag(run_id, "training_fingerprint", fingerprint)
