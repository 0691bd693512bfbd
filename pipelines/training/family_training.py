"""The train step of a family fitted in one process (every family but the platform's torch loop):
read the train and validation splits as frames, fit, write the family's files and ``training.json``
to the out dir (the export step reads them), and, given a run id, log the family to MLflow. Also what
those families share when they fit: labels, the calibration chosen on the score's logit, ranking scores.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.metrics import average_precision_score, roc_auc_score

from mlops.contract import DataContract
from mlops.errors import InputError
from pipelines.settings import PipelineSettings
from pipelines.training.calibrators import (
    DEFAULT_CALIBRATION,
    CalibrationChoice,
    calibration_entry,
    choose_calibration,
)
from pipelines.training.data import input_columns
from pipelines.training.families.converted import logit
from pipelines.training.families.interface import FitSummary, FittedModel, ModelFamily
from pipelines.training.trained_model import TrainingSummary, write_summary

log = logging.getLogger(__name__)
FAMILY_PARAMS_PREFIX = "family."  # each family parameter as its own MLflow param, beside model_params
IMPORTANCE_FILE = "feature_importance.json"
IMPORTANCE_PICTURE = "feature_importance.png"


def labels(frame: pd.DataFrame, contract: DataContract) -> np.ndarray:
    return frame[contract.label_column].to_numpy().astype(np.int64)


def fit_calibration(raw_validation: np.ndarray, validation_labels: np.ndarray,
                    settings: PipelineSettings) -> CalibrationChoice:
    """Class weights inflate a tree's scores as they do the MLP's: the ``calibration`` setting's map (auto:
    the best on validation) on the score's logit maps them back."""
    return choose_calibration(logit(raw_validation), validation_labels, settings.calibration, settings.seed)


def ranking_scores(labels_: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """(PR-AUC, ROC AUC) of ``scores``."""
    return float(average_precision_score(labels_, scores)), float(roc_auc_score(labels_, scores))


@dataclass(frozen=True)
class FamilyOutcome:
    fitted: FittedModel
    summary: FitSummary
    fingerprint: str


def family_fingerprint(family: ModelFamily, seed: int, data_sha256: dict[str, str], contract: DataContract,
                       calibration: str = DEFAULT_CALIBRATION) -> str:
    """What decides the fitted model (family, its params, seed, data, contract, the calibration setting):
    names the ONNX file's inputs."""
    blob = json.dumps({"family": family.name, "params": family.params, "seed": seed, "data": data_sha256,
                       "contract": contract.model_dump(mode="json"), **calibration_entry(calibration)},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def read_frame(path: Path, contract: DataContract, split: str) -> pd.DataFrame:
    """The model's inputs and the label of one split file; text columns as pandas categoricals (a
    code per row, not a string object: a third of the frame's memory at ten million rows)."""
    try:
        table = pq.read_table(path, columns=input_columns(contract))
        # self_destruct: each column's Arrow buffers are released as it is converted, not after the whole.
        frame: pd.DataFrame = table.to_pandas(strings_to_categorical=True, split_blocks=True, self_destruct=True)
        pa.default_memory_pool().release_unused()  # what the conversion freed goes back to the OS, not the pool
        return frame
    except (OSError, KeyError, ValueError, pa.ArrowException) as exc:
        raise InputError(f"{split} split {path} lacks the model's inputs or is not Parquet: {exc}") from exc


def train_family(family: ModelFamily, paths: dict[str, Path], out_dir: Path, contract: DataContract,
                 settings: PipelineSettings, data_sha256: dict[str, str], run_id: str | None) -> FamilyOutcome:
    frames = {name: read_frame(paths[name], contract, name) for name in ("train", "validation")}
    fitted, summary = family.fit(frames["train"], frames["validation"], contract)
    fingerprint = family_fingerprint(family, settings.seed, data_sha256, contract, settings.calibration)
    fitted.save(out_dir)
    write_summary(out_dir, TrainingSummary(
        fingerprint=fingerprint, data_sha256=data_sha256, best_epoch=summary.best_round,
        epochs_run=summary.rounds_run, stop_reason=summary.stop_reason, train_seconds=summary.seconds,
        rows_per_epoch=len(frames["train"]), threshold=fitted.threshold, device=summary.device, precision="fp32",
        world_size=1, params=family.params, family=family.name))
    log.info("%s fitted in %.1f s on %s (%s, %d rounds); val PR-AUC %.4f; wrote %s", family.name, summary.seconds,
             summary.device, summary.stop_reason, summary.rounds_run, summary.val_pr_auc, out_dir)
    if run_id:
        from pipelines.training.lineage import log_split_datasets

        log_family(run_id, family, fitted, summary, fingerprint, paths, data_sha256, contract)
        log_split_datasets(run_id, paths, data_sha256, contract)
    return FamilyOutcome(fitted=fitted, summary=summary, fingerprint=fingerprint)


def log_family(run_id: str, family: ModelFamily, fitted: FittedModel, summary: FitSummary, fingerprint: str,
               data_paths: dict[str, Path], data_sha256: dict[str, str], contract: DataContract) -> None:
    """The family, its params and seed as MLflow params, the split files as artifacts, how the fit went as
    metrics (one batch), and the model's feature importance where it has one (JSON and a picture)."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from pipelines.provenance import git_commit, library_versions
    from pipelines.training.tracking import TRAINING_DATA_ARTIFACTS

    params = {
        "model_family": family.name,
        "model_params": json.dumps(family.params, sort_keys=True, default=str),
        "seed": family.settings.seed,  # with the params and the split files (below): what --reproduce reruns
        **{f"{FAMILY_PARAMS_PREFIX}{k}": json.dumps(v, default=str) for k, v in family.params.items()},
        "device_used": summary.device,
        "stop_reason": summary.stop_reason,
        "training_fingerprint": fingerprint,
        "train_git_commit": git_commit(),
        **{f"{name}_sha256": digest for name, digest in data_sha256.items()},
        **{f"version_{name}": version for name, version in library_versions().items()},
    }
    now_ms = int(time.time() * 1000)
    metrics = {"best_val_pr_auc": summary.val_pr_auc, "best_val_roc_auc": summary.val_roc_auc,
               "best_epoch": float(summary.best_round), "train_seconds": summary.seconds,
               "decision_threshold": fitted.threshold}
    if summary.calibration is not None:
        params["calibration"] = summary.calibration.method
        params["calibration_setting"] = summary.calibration.setting
        metrics.update(summary.calibration.metrics())
    client = MlflowClient()
    client.log_batch(run_id, metrics=[Metric(k, v, now_ms, 0) for k, v in metrics.items()],
                     params=[Param(k, str(v)[:6000]) for k, v in params.items()])
    for path in data_paths.values():
        client.log_artifact(run_id, str(path), TRAINING_DATA_ARTIFACTS)
    client.set_tag(run_id, "model_family", family.name)
    client.set_tag(run_id, "training_fingerprint", fingerprint)
    importance = fitted.feature_importance(contract)
    if importance:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / IMPORTANCE_FILE).write_text(json.dumps(importance, indent=2))
            plot_importance(importance, folder / IMPORTANCE_PICTURE, family.name)
            # Beside evaluate's PR curve and confusion matrix, where a person looks at the model.
            client.log_artifacts(run_id, str(folder), "evaluation")


def plot_importance(importance: dict[str, float], path: Path, family: str) -> None:
    """Horizontal bars, the most important input on top."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = sorted(importance.items(), key=lambda item: item[1])
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(ranked) + 1.2))
    ax.barh([name for name, _ in ranked], [value for _, value in ranked])
    ax.set(xlabel="importance", title=f"Feature importance ({family})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
