"""Train step: fit the MLP on tensors held on the training device, resumable and data-parallel.

The training set lives on the device and batches are index slices of it (no DataLoader: for
in-memory tabular data its per-batch collation only costs time; benchmarks/ measures it). Each
epoch's rows and order come from (seed, epoch), so a resumed run and every rank of a distributed run
agree on them; each rank takes its own shard. Optional negative downsampling draws a fresh share of
the negatives each epoch and weights them up by its inverse. Training stops at max epochs, on early
stopping, or when the wall-clock budget is spent. Checkpoints carry model, optimiser, scheduler,
RNG state and the position in the epoch, so a run stopped by SIGTERM resumes bit for bit on the CPU.
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F  # noqa: N812  (the name torch's own documentation uses)
from pydantic import BaseModel, ConfigDict, Field
from sklearn.metrics import average_precision_score, roc_auc_score

from mlops.calibration import CalibrationReport, calibration_report
from mlops.contract import DataContract
from mlops.errors import TrainingError
from mlops.model import TabularMLP, fit_vocabularies
from pipelines.settings import PipelineSettings
from pipelines.training.calibrators import CalibrationChoice, calibrate_network
from pipelines.training.checkpoint import CheckpointStore, PreemptionFlag, TrainingPreempted
from pipelines.training.data import (
    SplitArrays,
    epoch_rows,
    negative_weights,
    sampled_negative_rate,
    split_arrays,
    to_device,
)
from pipelines.training.distributed import Rank, any_rank, pick_device, shard, sum_over_ranks
from pipelines.training.system_metrics import SystemMetrics, device_metrics
from pipelines.training.trained_model import TrainedModel

log = logging.getLogger(__name__)

_EVAL_BATCH = 8192
_PREEMPTION_CHECK_EVERY = 16  # steps, when distributed


class TrainParams(BaseModel):
    """Everything that decides the trained weights; defaults live in PipelineSettings (``from_settings``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    max_epochs: int = Field(ge=1)
    patience: int = Field(ge=1)
    batch_size: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    device: str = Field(pattern="^(auto|cpu|cuda)$")
    hidden_sizes: tuple[int, ...] = Field(min_length=1)
    dropout: float = Field(ge=0, lt=1)
    weight_decay: float = Field(ge=0)
    precision: Literal["auto", "fp32", "bf16"]
    compile_model: bool
    # Defaults here too: runs recorded before these settings existed still reproduce.
    negative_sample_rate: float = Field(default=1.0, gt=0, le=1)
    max_train_seconds: float | None = Field(default=None, gt=0)
    max_epoch_rows: int | None = Field(default=None, ge=1)

    @classmethod
    def from_settings(cls, settings: PipelineSettings) -> TrainParams:
        return cls.model_validate(settings.model_dump(include=set(cls.model_fields)))


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    train_loss: float
    val_loss: float
    val_pr_auc: float
    val_roc_auc: float


EPOCH_KEYS = tuple(f.name for f in fields(EpochMetrics) if f.name != "epoch")


@dataclass
class Checkpointing:
    """Where and how often to checkpoint; ``fingerprint`` guards against resuming another run's state."""

    store: CheckpointStore
    fingerprint: str
    interval_s: float = 120.0
    preemption: PreemptionFlag = field(default_factory=PreemptionFlag)


@dataclass
class _Progress:
    epoch: int = 1
    step_in_epoch: int = 0
    global_step: int = 0
    loss_sum: float = 0.0
    history: list[EpochMetrics] = field(default_factory=list)
    system: list[SystemMetrics] = field(default_factory=list)
    best_score: float = -1.0
    best_epoch: int = 0
    done: bool = False
    stop_reason: str = ""  # max_epochs, early_stopping or time_budget once done
    seconds: float = 0.0  # wall clock spent training so far, over every resumed segment
    rows_per_epoch: int = 0  # the last epoch's, after negative downsampling, over all ranks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> _Progress:
        return cls(**{**raw, "history": [EpochMetrics(**m) for m in raw["history"]],
                      "system": [SystemMetrics(**m) for m in raw["system"]]})


@dataclass(frozen=True)
class TrainResult:
    model: TabularMLP
    vocabs: dict[str, list[str]]
    history: list[EpochMetrics]
    system: list[SystemMetrics]
    best_epoch: int
    threshold: float
    device: str
    precision: str
    world_size: int
    val_uncalibrated: CalibrationReport
    val_calibrated: CalibrationReport
    calibration: CalibrationChoice  # Platt and none live in the model's buffer; isotonic travels beside it
    stop_reason: str  # max_epochs, early_stopping or time_budget
    seconds: float
    rows_per_epoch: int
    negative_sample_rate: float  # the share of negatives each epoch drew (max_epoch_rows may lower it)

    @property
    def best(self) -> EpochMetrics:
        return self.history[self.best_epoch - 1]

    @property
    def trained(self) -> TrainedModel:
        """What the export step needs: weights with calibration, vocabularies, threshold."""
        isotonic = self.calibration.calibrator if self.calibration.method == "isotonic" else None
        return TrainedModel(model=self.model, vocabs=self.vocabs, threshold=self.threshold, calibrator=isotonic)


class _Logits(torch.nn.Module):
    """The model's raw score as ``forward``: DistributedDataParallel syncs gradients only through forward."""

    def __init__(self, model: TabularMLP) -> None:
        super().__init__()
        self.model = model

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        return self.model.logits(numeric, categorical)


@torch.no_grad()
def _logits(model: TabularMLP, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
    model.eval()
    return torch.cat([model.logits(numeric[i:i + _EVAL_BATCH], categorical[i:i + _EVAL_BATCH])
                      for i in range(0, len(numeric), _EVAL_BATCH)])


def _use_bf16(precision: str, device: torch.device) -> bool:
    if precision == "bf16":
        return True
    return precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()


def train_model(train: SplitArrays | pd.DataFrame, val: SplitArrays | pd.DataFrame, contract: DataContract,
                params: TrainParams, *, rank: Rank | None = None, checkpointing: Checkpointing | None = None,
                on_epoch: Callable[[EpochMetrics], None] | None = None,
                network: Callable[[], TabularMLP] | None = None, calibration: str = "platt") -> TrainResult:
    """Train with early stopping on validation PR-AUC, keep the best epoch, calibrate on validation.

    The splits come as arrays (:func:`~pipelines.training.data.read_split`) or as frames, encoded here.
    ``network`` builds the module to train (a user's, :class:`~pipelines.training.families.torch_net.
    UserNetwork`); by default the MLP ``params`` describe. ``calibration`` is the setting (auto, platt,
    isotonic, none): :func:`~pipelines.training.calibrators.choose_calibration`.
    """
    vocabs = fit_vocabularies(contract)
    train_arrays = split_arrays(train, contract, vocabs, "train")
    val_arrays = split_arrays(val, contract, vocabs, "validation")
    rank = rank or Rank(rank=0, local_rank=0, world_size=1, device=pick_device(params.device))
    if rank.device.type == "cuda":  # cuBLAS needs this before its first call to be deterministic
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    # CUDA has kernels without a deterministic twin; there a warning, on the CPU a hard guarantee.
    torch.use_deterministic_algorithms(True, warn_only=rank.device.type == "cuda")
    try:
        return _Trainer(train_arrays, val_arrays, contract, vocabs, params, rank, checkpointing,
                        network, calibration).run(on_epoch)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)


class _Trainer:
    def __init__(self, train: SplitArrays, val: SplitArrays, contract: DataContract, vocabs: dict[str, list[str]],
                 params: TrainParams, rank: Rank, checkpointing: Checkpointing | None,
                 network: Callable[[], TabularMLP] | None = None, calibration: str = "platt") -> None:
        self.params, self.rank, self.ckpt, self.vocabs = params, rank, checkpointing, vocabs
        self.calibration = calibration
        device = rank.device
        random.seed(params.seed)
        np.random.seed(params.seed)
        torch.manual_seed(params.seed)  # identical initial weights on every rank
        self.x_num, self.x_cat, self.y = (to_device(a, device) for a in (train.numeric, train.categorical,
                                                                          train.labels))
        self.v_num, self.v_cat, self.v_y = (to_device(a, device) for a in (val.numeric, val.categorical,
                                                                            val.labels))
        self.positive = torch.from_numpy(train.labels > 0.5)  # on the host: epoch_rows samples there
        self.negative_rate = sampled_negative_rate(params.negative_sample_rate, params.max_epoch_rows,
                                                   int(self.positive.sum()), len(self.positive))
        self.weights = negative_weights(self.y, self.negative_rate)
        model = network() if network is not None else TabularMLP.for_contract(contract, vocabs, params.hidden_sizes,
                                                                             params.dropout)
        self.model = model.to(device)
        self.model.fit_scaler(train.numeric)
        positives = float(train.labels.sum())
        # Positives are rare: weight them by the negative/positive ratio (of the full data, which the
        # downsampling weights restore) so they are not ignored.
        self.pos_weight = torch.tensor((len(train) - positives) / positives, device=device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=params.learning_rate,
                                          weight_decay=params.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer, mode="max", factor=0.5, patience=max(1, params.patience // 2))
        net: torch.nn.Module = _Logits(self.model)
        if rank.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [device.index] if device.type == "cuda" else None
            net = DistributedDataParallel(net, device_ids=ids, forward_sync_buffers=False)
        self.net: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = (
            torch.compile(net) if params.compile_model else net)
        self.bf16 = _use_bf16(params.precision, device)
        # Dropout noise differs per rank, like a larger batch would draw it.
        torch.manual_seed(params.seed + rank.rank)
        self.progress = _Progress()
        self.clock = time.monotonic()
        self.best_state: dict[str, torch.Tensor] = {}
        self.per_rank_batch = math.ceil(params.batch_size / rank.world_size)

    def _payload(self) -> dict[str, Any]:
        assert self.ckpt is not None
        cuda = self.rank.device.type == "cuda"
        return {
            "fingerprint": self.ckpt.fingerprint,
            "progress": self.progress.to_dict(),
            "model": self.model.state_dict(),
            "best_model": self.best_state,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state(self.rank.device) if cuda else torch.zeros(0, dtype=torch.uint8),
        }

    def _save(self) -> None:
        if self.ckpt is not None and self.rank.is_main:
            self.ckpt.store.save(self.progress.global_step, self._payload())

    def _resume(self) -> None:
        payload = self.ckpt.store.latest() if self.ckpt is not None else None
        if payload is None or self.ckpt is None:
            return
        if payload["fingerprint"] != self.ckpt.fingerprint:
            raise TrainingError(f"checkpoints under {self.ckpt.store.url} belong to another training "
                                f"configuration or dataset ({payload['fingerprint'][:12]} != "
                                f"{self.ckpt.fingerprint[:12]}); use another --checkpoint-dir")
        self.model.load_state_dict(payload["model"])
        self.best_state = payload["best_model"]
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.progress = _Progress.from_dict(payload["progress"])
        torch.set_rng_state(payload["rng_cpu"])
        if self.rank.device.type == "cuda" and payload["rng_cuda"].numel():
            torch.cuda.set_rng_state(payload["rng_cuda"], self.rank.device)
        log.info("resumed at epoch %d step %d", self.progress.epoch, self.progress.step_in_epoch)

    def _my_rows(self, epoch: int) -> torch.Tensor:
        order = epoch_rows(self.positive, self.negative_rate, self.params.seed, epoch)
        return shard(order, self.rank).to(self.rank.device, non_blocking=True)

    def _loss(self, logits: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        weight = None if self.weights is None else self.weights[idx]
        return F.binary_cross_entropy_with_logits(logits, self.y[idx], weight=weight, pos_weight=self.pos_weight)

    def _tick(self) -> None:
        """Add the wall clock since the last tick to the run's training time (kept in checkpoints)."""
        now = time.monotonic()
        self.progress.seconds += now - self.clock
        self.clock = now

    def _over_budget(self) -> bool:
        self._tick()
        budget = self.params.max_train_seconds
        return budget is not None and self.progress.seconds >= budget

    def _train_epoch(self, epoch: int) -> SystemMetrics:
        p = self.progress
        self.model.train()
        mine = self._my_rows(epoch)
        p.rows_per_epoch = len(mine) * self.rank.world_size
        steps = math.ceil(len(mine) / self.per_rank_batch)
        running = torch.tensor(p.loss_sum, device=self.rank.device)
        started, first_step, last_save = time.perf_counter(), p.step_in_epoch, time.monotonic()
        for step in range(p.step_in_epoch, steps):
            idx = mine[step * self.per_rank_batch:(step + 1) * self.per_rank_batch]
            self.optimizer.zero_grad(set_to_none=True)
            with torch.autocast(self.rank.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                logits = self.net(self.x_num[idx], self.x_cat[idx])
            loss = self._loss(logits.float(), idx)
            torch.autograd.backward(loss)
            self.optimizer.step()
            running += loss.detach() * len(idx)
            p.step_in_epoch, p.global_step = step + 1, p.global_step + 1
            # Across ranks the flag costs an all-reduce and a host sync, so ranks compare it every few steps.
            check = not self.rank.distributed or (step + 1) % _PREEMPTION_CHECK_EVERY == 0 or step + 1 == steps
            preempted = self.ckpt is not None and check and any_rank(self.ckpt.preemption.requested, self.rank)
            # The interval's checkpoint skips an epoch's last step: _end_epoch writes that step's next.
            interval_due = self.ckpt is not None and time.monotonic() - last_save > self.ckpt.interval_s
            if preempted or (interval_due and step + 1 < steps):
                p.loss_sum = float(running)
                self._tick()
                self._save()
                last_save = time.monotonic()
            if preempted:
                raise TrainingPreempted(f"SIGTERM: checkpointed at epoch {epoch} step {p.step_in_epoch}/{steps} "
                                        f"(global step {p.global_step}); rerun to resume")
            # The budget ends the epoch here; it is validated like a full one. All ranks stop together.
            budgeted = self.params.max_train_seconds is not None and check and step + 1 < steps
            if budgeted and any_rank(self._over_budget(), self.rank):
                p.stop_reason = "time_budget"
                break
        if self.rank.device.type == "cuda":
            torch.cuda.synchronize(self.rank.device)
        elapsed = time.perf_counter() - started
        p.loss_sum = float(running)
        samples = min(len(mine), (p.step_in_epoch - first_step) * self.per_rank_batch) * self.rank.world_size
        return device_metrics(epoch, samples / elapsed if elapsed > 0 else 0.0, self.rank.device)

    def _end_epoch(self, epoch: int, system: SystemMetrics) -> None:
        """Validate, keep the best weights, step the scheduler, decide whether training stops."""
        p = self.progress
        trained_rows = min(p.rows_per_epoch // self.rank.world_size, p.step_in_epoch * self.per_rank_batch)
        loss_sum, count = sum_over_ranks([p.loss_sum, float(trained_rows)], self.rank)
        val_logits = _logits(self.model, self.v_num, self.v_cat)
        if not torch.isfinite(val_logits).all():
            raise TrainingError(f"training diverged at epoch {epoch} (non-finite scores); lower the learning rate")
        val_labels, val_probs = self.v_y.cpu().numpy(), torch.sigmoid(val_logits).cpu().numpy()
        metrics = EpochMetrics(epoch=epoch, train_loss=loss_sum / count,
                               val_loss=float(F.binary_cross_entropy_with_logits(val_logits, self.v_y,
                                                                                 pos_weight=self.pos_weight)),
                               val_pr_auc=float(average_precision_score(val_labels, val_probs)),
                               val_roc_auc=float(roc_auc_score(val_labels, val_probs)))
        p.history.append(metrics)
        p.system.append(system)
        if metrics.val_pr_auc > p.best_score:
            p.best_score, p.best_epoch = metrics.val_pr_auc, epoch
            self.best_state = {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}
        self.scheduler.step(metrics.val_pr_auc)
        p.epoch, p.step_in_epoch, p.loss_sum = epoch + 1, 0, 0.0
        # Every rank holds the same weights and validation set, so all reach the same verdict; the
        # budget's verdict is rank 0's clock, shared, so no rank runs an epoch the others skip.
        if not p.stop_reason and any_rank(self._over_budget(), self.rank):
            p.stop_reason = "time_budget"
        if not p.stop_reason and epoch >= self.params.max_epochs:
            p.stop_reason = "max_epochs"
        if not p.stop_reason and epoch - p.best_epoch >= self.params.patience:
            p.stop_reason = "early_stopping"
        p.done = bool(p.stop_reason)
        self._save()

    def run(self, on_epoch: Callable[[EpochMetrics], None] | None) -> TrainResult:
        self._resume()
        p = self.progress
        self.clock = time.monotonic()
        while not p.done:
            epoch = p.epoch
            self._end_epoch(epoch, self._train_epoch(epoch))
            if on_epoch is not None:
                on_epoch(p.history[-1])
        if p.stop_reason != "max_epochs":
            log.info("%s at epoch %d after %.0f s; best epoch %d (val PR-AUC %.4f)",
                     p.stop_reason.replace("_", " "), len(p.history), p.seconds, p.best_epoch, p.best_score)
        return self._finish()

    def _finish(self) -> TrainResult:
        p = self.progress
        self.model.load_state_dict(self.best_state)
        logits = _logits(self.model, self.v_num, self.v_cat).cpu().numpy().astype(np.float64)
        labels = self.v_y.cpu().numpy()
        model = self.model.cpu().eval()
        choice, calibrated, threshold = calibrate_network(model, logits, labels, self.v_num.cpu().numpy(),
                                                          self.v_cat.cpu().numpy(), self.calibration, self.params.seed)
        uncalibrated = 1.0 / (1.0 + np.exp(-logits))
        return TrainResult(model=model, vocabs=self.vocabs, history=p.history, system=p.system,
                           best_epoch=p.best_epoch, threshold=threshold, device=self.rank.device.type,
                           precision="bf16" if self.bf16 else "fp32", world_size=self.rank.world_size,
                           val_uncalibrated=calibration_report(labels, uncalibrated),
                           val_calibrated=calibration_report(labels, calibrated), calibration=choice,
                           stop_reason=p.stop_reason,
                           seconds=p.seconds, rows_per_epoch=p.rows_per_epoch,
                           negative_sample_rate=self.negative_rate)
