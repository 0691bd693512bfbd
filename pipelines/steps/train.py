"""Train step: fit the fraud MLP, export it to ONNX with a parity check, log it all to MLflow.

Plain typed functions; the KFP component and the CLI wrap them. Training is reproducible on CPU
(seeds, deterministic algorithms, a seeded shuffling generator) and uses a GPU when one is there.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import pandas as pd
import torch
from pydantic import BaseModel, ConfigDict, Field
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score

from mlops.contract import DataContract
from mlops.errors import TrainingError
from mlops.model import FraudMLP, encode, fit_vocabularies
from mlops.onnx_export import check_parity, export_onnx
from mlops.registry import ONNX_FILE
from mlops.settings import Settings

if TYPE_CHECKING:
    from mlflow.models.signature import ModelSignature

log = logging.getLogger(__name__)

_EVAL_BATCH = 8192


class TrainParams(BaseModel):
    """The training knobs; their defaults live in Settings (``from_settings``), not here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    max_epochs: int = Field(ge=1)
    patience: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    device: str = Field(pattern="^(auto|cpu|cuda)$")

    @classmethod
    def from_settings(cls, settings: Settings) -> TrainParams:
        return cls.model_validate(settings.model_dump(include=set(cls.model_fields)))


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    train_loss: float
    val_loss: float
    val_pr_auc: float
    val_roc_auc: float


@dataclass(frozen=True)
class TrainResult:
    model: FraudMLP
    vocabs: dict[str, list[str]]
    history: list[EpochMetrics]
    best_epoch: int
    threshold: float
    device: str

    @property
    def best(self) -> EpochMetrics:
        return self.history[self.best_epoch - 1]


@dataclass(frozen=True)
class ExportResult:
    onnx_path: Path
    max_abs_diff: float


_EPOCH_KEYS = tuple(f.name for f in fields(EpochMetrics) if f.name != "epoch")


def _pick_device(requested: str) -> torch.device:
    device = torch.device("cuda" if requested != "cpu" and torch.cuda.is_available() else "cpu")
    if requested == "cuda" and device.type != "cuda":
        log.warning("device=cuda requested but CUDA is not available; training on cpu")
    log.info("training on %s", device)
    return device


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _check_labels(labels: np.ndarray, split: str) -> None:
    positives = int(labels.sum())
    if positives == 0 or positives == len(labels):
        only = "positive" if positives else "negative"
        raise TrainingError(
            f"{split} labels are all {only} ({len(labels)} rows): a classifier needs both classes"
        )


def _best_f1_threshold(labels: np.ndarray, probs: np.ndarray) -> float:
    precision, recall, thresholds = precision_recall_curve(labels, probs)
    # The last precision/recall pair has no threshold (recall 0 by convention).
    p, r = precision[:-1], recall[:-1]
    f1 = np.divide(2 * p * r, p + r, out=np.zeros_like(p), where=(p + r) > 0)
    return float(thresholds[int(np.argmax(f1))])


def _tensors(
    frame: pd.DataFrame,
    contract: DataContract,
    vocabs: dict[str, list[str]],
    device: torch.device,
    split: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    numeric, categorical = encode(frame, contract, vocabs)
    bad = [name for name, ok in zip(contract.numeric_inputs, np.isfinite(numeric).all(axis=0), strict=True)
           if not ok]
    if bad:  # NaN would silently poison the scaler and every gradient
        raise TrainingError(f"{split} data has missing or non-finite values in {bad}")
    labels = frame[contract.label_column].to_numpy(np.float32)
    return (torch.as_tensor(numeric, device=device), torch.as_tensor(categorical, device=device),
            torch.as_tensor(labels, device=device))


@torch.no_grad()
def _evaluate(
    model: FraudMLP, loss_fn: torch.nn.Module, numeric: torch.Tensor, categorical: torch.Tensor,
    labels: torch.Tensor,
) -> tuple[float, np.ndarray]:
    model.eval()
    logits = torch.cat([model.logits(numeric[i:i + _EVAL_BATCH], categorical[i:i + _EVAL_BATCH])
                        for i in range(0, len(labels), _EVAL_BATCH)])
    loss = float(loss_fn(logits, labels))
    return loss, torch.sigmoid(logits).cpu().numpy()


def train_model(
    train: pd.DataFrame,
    val: pd.DataFrame,
    contract: DataContract,
    params: TrainParams,
    *,
    on_epoch: Callable[[EpochMetrics], None] | None = None,
) -> TrainResult:
    """Train with early stopping on validation PR-AUC; the best epoch's weights are kept."""
    _check_labels(train[contract.label_column].to_numpy(), "train")
    _check_labels(val[contract.label_column].to_numpy(), "validation")
    device = _pick_device(params.device)
    if device.type == "cuda":  # cuBLAS needs this before its first call to be deterministic
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        return _fit(train, val, contract, params, device, on_epoch)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


def _fit(
    train: pd.DataFrame,
    val: pd.DataFrame,
    contract: DataContract,
    params: TrainParams,
    device: torch.device,
    on_epoch: Callable[[EpochMetrics], None] | None,
) -> TrainResult:
    _seed_everything(params.seed)
    vocabs = fit_vocabularies(contract)
    x_num, x_cat, y = _tensors(train, contract, vocabs, device, "train")
    v_num, v_cat, v_y = _tensors(val, contract, vocabs, device, "validation")
    model = FraudMLP.for_contract(contract, vocabs).to(device)
    model.fit_scaler(x_num.cpu().numpy())
    positives = float(y.sum())
    # Fraud is rare: weight positives by the negative/positive ratio so they are not ignored.
    pos_weight = torch.tensor((len(y) - positives) / positives, device=device)
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    optimizer = torch.optim.Adam(model.parameters(), lr=params.learning_rate)
    shuffler = torch.Generator().manual_seed(params.seed)
    val_labels = v_y.cpu().numpy()

    history: list[EpochMetrics] = []
    best_state: dict[str, torch.Tensor] = {}
    best_score, best_epoch = -1.0, 0
    for epoch in range(1, params.max_epochs + 1):
        model.train()
        order = torch.randperm(len(y), generator=shuffler).to(device)
        total = 0.0
        for start in range(0, len(y), params.batch_size):
            idx = order[start:start + params.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model.logits(x_num[idx], x_cat[idx]), y[idx])
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(idx)
        val_loss, val_probs = _evaluate(model, loss_fn, v_num, v_cat, v_y)
        if not np.isfinite(val_probs).all():
            raise TrainingError(f"training diverged at epoch {epoch} (non-finite scores); lower the learning rate")
        metrics = EpochMetrics(
            epoch=epoch,
            train_loss=total / len(y),
            val_loss=val_loss,
            val_pr_auc=float(average_precision_score(val_labels, val_probs)),
            val_roc_auc=float(roc_auc_score(val_labels, val_probs)),
        )
        history.append(metrics)
        if on_epoch is not None:
            on_epoch(metrics)
        if metrics.val_pr_auc > best_score:
            best_score, best_epoch = metrics.val_pr_auc, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        elif epoch - best_epoch >= params.patience:
            log.info("early stop at epoch %d; best epoch %d (val PR-AUC %.4f)", epoch, best_epoch, best_score)
            break

    model.load_state_dict(best_state)
    _, best_probs = _evaluate(model, loss_fn, v_num, v_cat, v_y)
    model = model.cpu().eval()
    return TrainResult(
        model=model,
        vocabs=vocabs,
        history=history,
        best_epoch=best_epoch,
        threshold=_best_f1_threshold(val_labels, best_probs),
        device=device.type,
    )


def export_and_check(
    result: TrainResult,
    contract: DataContract,
    test: pd.DataFrame,
    out_dir: Path,
    tolerance: float,
    metadata: dict[str, str],
) -> ExportResult:
    """Export to ``out_dir/model.onnx`` and verify it scores ``test`` like the torch model."""
    path = export_onnx(result.model, contract, result.vocabs, Path(out_dir) / ONNX_FILE,
                       threshold=result.threshold, metadata=metadata)
    diff = check_parity(result.model, path, test, contract, result.vocabs, tolerance)
    log.info("exported %s; parity max abs diff %.3g", path, diff)
    return ExportResult(onnx_path=path, max_abs_diff=diff)


def _signature_from_onnx(model: onnx.ModelProto) -> ModelSignature:
    """One [batch, 1] tensor per graph input, as the graph takes them.

    Tensor specs (not column specs) make MLflow reshape each column of a dataframe_split to
    [batch, 1], so `mlflow models serve` scores the registered model as it is.
    """
    import numpy as np
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, Schema, TensorSpec

    kinds = {onnx.TensorProto.FLOAT: np.dtype("float32"), onnx.TensorProto.STRING: np.dtype("O")}
    inputs: list[ColSpec | TensorSpec] = [
        TensorSpec(kinds[i.type.tensor_type.elem_type], (-1, 1), i.name) for i in model.graph.input
    ]
    outputs: list[ColSpec | TensorSpec] = [TensorSpec(np.dtype("float32"), (-1, 1), o.name)
                                           for o in model.graph.output]
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs))


def _runtime_requirements() -> list[str]:
    """Pinned requirements to score the logged model: onnx plus whichever onnxruntime is installed."""
    pins = [f"onnx=={onnx.__version__}"]
    for dist in ("onnxruntime-gpu", "onnxruntime"):
        try:
            return [*pins, f"{dist}=={metadata.version(dist)}"]
        except metadata.PackageNotFoundError:
            continue
    return pins


def log_training_to_mlflow(
    run_id: str,
    params: TrainParams,
    result: TrainResult,
    export: ExportResult,
    *,
    extra_params: dict[str, str],
) -> str:
    """Log params, per-epoch and best metrics and the ONNX model to run ``run_id``; returns the model URI."""
    import mlflow
    import mlflow.onnx
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    now_ms = int(time.time() * 1000)
    logged_params = {
        **{k: str(v) for k, v in params.model_dump().items()},
        **extra_params,
        "device_used": result.device,
        "epochs_run": str(len(result.history)),
    }
    history = [
        Metric(key=key, value=getattr(m, key), timestamp=now_ms, step=m.epoch)
        for m in result.history
        for key in _EPOCH_KEYS
    ]
    best = result.best
    summary = {
        **{f"best_{key}": float(getattr(best, key)) for key in _EPOCH_KEYS},
        "best_epoch": float(result.best_epoch),
        "decision_threshold": result.threshold,
        "export_max_abs_diff": export.max_abs_diff,
    }
    history += [Metric(key=k, value=v, timestamp=now_ms, step=0) for k, v in summary.items()]
    # One call for all metrics and params: a round trip per value is slow against a remote server.
    client.log_batch(run_id, metrics=history, params=[Param(k, v) for k, v in logged_params.items()])

    onnx_model = onnx.load_model(str(export.onnx_path))
    active = mlflow.active_run()
    # A caller may already have this run open (a pipeline step wrapping us); reuse it then.
    run_context: AbstractContextManager[object] = (
        nullcontext() if active is not None and active.info.run_id == run_id
        else mlflow.start_run(run_id=run_id, nested=active is not None)
    )
    with run_context:
        info = mlflow.onnx.log_model(
            onnx_model,
            name="model",
            signature=_signature_from_onnx(onnx_model),
            save_as_external_data=False,
            # Stated, not inferred: inference re-imports the model in a subprocess (seconds).
            pip_requirements=_runtime_requirements(),
        )
    return str(info.model_uri)
