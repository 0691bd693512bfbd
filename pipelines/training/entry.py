"""The training entry point: ``python -m pipelines.training.entry`` alone or under ``torchrun``.

    python -m pipelines.training.entry --data-dir DIR --out-dir DIR [--checkpoint-dir URL] [--run-id ID]
    torchrun --nnodes=N --nproc_per_node=G -m pipelines.training.entry --data-dir DIR --out-dir DIR ...

DIR holds train.parquet, validation.parquet and test.parquet as preprocess writes them. Every rank
trains on its shard; rank 0 alone logs to MLflow (when a run id is given), checkpoints and writes
``model.pt`` + ``training.json`` to the out dir, which the export step reads. SIGTERM checkpoints
and exits with code 143; the same command again resumes from the newest checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mlops.contract import DataContract, load_contract
from mlops.errors import MLOpsError
from mlops.model import fit_vocabularies
from mlops.registry_client import activate
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training import distributed
from pipelines.training.calibrators import DEFAULT_CALIBRATION, calibration_entry
from pipelines.training.checkpoint import CheckpointStore, sigterm_requests_checkpoint
from pipelines.training.data import read_split
from pipelines.training.families.bundled import LoopFamily, ModelFamily, family_for
from pipelines.training.families.models import FittedModel
from pipelines.training.trained_model import MODEL_FILE, TrainingSummary, write_summary
from pipelines.training.trainer import Checkpointing, EpochMetrics, TrainParams, TrainResult, train_model

log = logging.getLogger("pipelines.training.entry")  # not "__main__" under `python -m`


@dataclass(frozen=True)
class TrainOutcome:
    result: TrainResult | None  # the platform loop's (mlp); None for a family fitted in one process
    fingerprint: str
    data_sha256: dict[str, str]
    is_main: bool


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def training_fingerprint(params: TrainParams, data_sha256: dict[str, str], contract: DataContract,
                         family: dict[str, Any] | None = None, calibration: str = DEFAULT_CALIBRATION) -> str:
    """What decides the trained model (settings, data, contract; a user's module and its params; the
    calibration setting): names a checkpoint's run and the ONNX file. The MLP has no ``family`` entry and
    the default calibration (``auto``) none, so the fingerprints of such runs stay as they were."""
    decided: dict[str, Any] = {"params": params.model_dump(mode="json"), "data": data_sha256,
                               "contract": contract.model_dump(mode="json")}
    if family is not None:
        decided["family"] = family
    decided.update(calibration_entry(calibration))
    blob = json.dumps(decided, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def checkpoint_location(base: str, resume_key: str | None, fingerprint: str) -> str:
    """One folder per key (an MLflow run id: a retried step resumes it) or, without one, per fingerprint."""
    return f"{base.rstrip('/')}/{resume_key or fingerprint[:16]}"


def run_training(paths: dict[str, Path], out_dir: Path, checkpoint_dir: str, *, run_id: str | None = None,
                 params: TrainParams | None = None, settings: PipelineSettings | None = None,
                 resume_key: str | None = None) -> TrainOutcome:
    """Train on this process's rank; rank 0 writes the model and, given a run id, logs to MLflow.

    Checkpoints go to ``checkpoint_dir/<resume_key or training fingerprint>``: a rerun with the same key
    (the pipeline's run id on a retried step; the same data and settings otherwise) resumes.
    """
    settings = settings or PipelineSettings()
    contract = load_contract(settings.contract_path)
    family = family_for(settings)
    if not isinstance(family, LoopFamily):
        return _train_in_process(family, paths, out_dir, contract, settings, run_id)
    params = params or TrainParams.from_settings(settings)
    vocabs = fit_vocabularies(contract)
    network = family.network_builder(contract, vocabs)  # a user's module that cannot be built stops here
    # Only the model's inputs and the label, columnar; the test split is the export step's.
    arrays = {name: read_split(paths[name], contract, vocabs, name) for name in ("train", "validation")}
    data_sha256 = {name: file_sha256(path) for name, path in paths.items()}
    own = family.own_params()
    fingerprint = training_fingerprint(params, data_sha256, contract, None if own is None else {family.name: own},
                                       settings.calibration)
    rank = distributed.start(params.device)
    try:
        store = CheckpointStore(checkpoint_location(checkpoint_dir, resume_key, fingerprint))

        def show(epoch: EpochMetrics) -> None:
            if rank.is_main:
                log.info("epoch %d/%d: train loss %.4f, val loss %.4f, val PR-AUC %.4f, val ROC-AUC %.4f",
                         epoch.epoch, params.max_epochs, epoch.train_loss, epoch.val_loss, epoch.val_pr_auc,
                         epoch.val_roc_auc)

        with sigterm_requests_checkpoint() as preemption:
            result = train_model(arrays["train"], arrays["validation"], contract, params, rank=rank,
                                 checkpointing=Checkpointing(store, fingerprint, settings.checkpoint_interval_s,
                                                             preemption),
                                 on_epoch=show, network=network, calibration=settings.calibration)
        if rank.is_main:
            _write_outputs(out_dir, family.fitted(result, params, contract), result, params, fingerprint,
                           data_sha256)
            if run_id:
                from pipelines.training.lineage import log_split_datasets
                from pipelines.training.tracking import log_training

                activate(settings)  # the logging goes through MLflow's global URIs (a torchrun rank too)
                log_training(run_id, params, result, fingerprint=fingerprint, data=paths, data_sha256=data_sha256,
                             family=family.name, family_params=own)
                log_split_datasets(run_id, paths, data_sha256, contract)
    finally:
        distributed.stop(rank)
    return TrainOutcome(result=result, fingerprint=fingerprint, data_sha256=data_sha256, is_main=rank.is_main)


def _train_in_process(family: ModelFamily, paths: dict[str, Path], out_dir: Path, contract: DataContract,
                      settings: PipelineSettings, run_id: str | None) -> TrainOutcome:
    """A family that fits in one process: rank 0 of one, no checkpoints (a fit is minutes, rerun it)."""
    from pipelines.training.family_training import train_family

    if run_id:
        activate(settings)
    data_sha256 = {name: file_sha256(path) for name, path in paths.items()}
    fitted = train_family(family, paths, out_dir, contract, settings, data_sha256, run_id)
    return TrainOutcome(result=None, fingerprint=fitted.fingerprint, data_sha256=data_sha256, is_main=True)


def _write_outputs(out_dir: Path, fitted: FittedModel, result: TrainResult, params: TrainParams, fingerprint: str,
                   data_sha256: dict[str, str]) -> None:
    fitted.save(out_dir)
    write_summary(out_dir, TrainingSummary(
        fingerprint=fingerprint, data_sha256=data_sha256, best_epoch=result.best_epoch,
        epochs_run=len(result.history), stop_reason=result.stop_reason, train_seconds=result.seconds,
        rows_per_epoch=result.rows_per_epoch, threshold=result.threshold, device=result.device,
        precision=result.precision, world_size=result.world_size, params=params.model_dump(mode="json"),
        family=fitted.family))
    log.info("rank 0 wrote %s (best epoch %d, threshold %.4f)", out_dir / MODEL_FILE, result.best_epoch,
             result.threshold)


def launch_on_local_gpus(paths: dict[str, Path], out_dir: Path, checkpoint_dir: str, run_id: str) -> bool:
    """With several GPUs in this pod, train under torchrun (one process per GPU); False when there is one or none."""
    gpus = torch.cuda.device_count()
    if gpus < 2:
        return False
    data_dir = out_dir.parent / f"{out_dir.name}-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for name, path in paths.items():
        target = data_dir / f"{name}.parquet"
        target.unlink(missing_ok=True)
        target.symlink_to(path.resolve())
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={gpus}", "-m",
               "pipelines.training.entry", "--data-dir", str(data_dir), "--out-dir", str(out_dir),
               "--checkpoint-dir", checkpoint_dir, "--run-id", run_id]
    log.info("training on %d local GPUs: %s", gpus, " ".join(command))
    subprocess.run(command, check=True)
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipelines.training.entry", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="holds train/validation/test.parquet")
    parser.add_argument("--out-dir", type=Path, required=True, help="rank 0 writes model.pt and training.json")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="local path or fsspec URL (default MLOPS_CHECKPOINT_DIR, else <home>/checkpoints)")
    parser.add_argument("--run-id", default=None, help="MLflow run to log into (rank 0)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from pipelines.logs import configure_logging
    from pipelines.training.checkpoint import TrainingPreempted

    configure_logging()
    args = parse_args(argv)
    try:
        settings = PipelineSettings()
        run_training(split_paths(args.data_dir), args.out_dir, args.checkpoint_dir or settings.resolved_checkpoint_dir,
                     run_id=args.run_id, settings=settings, resume_key=args.run_id)
    except TrainingPreempted as exc:
        log.warning("%s", exc.message)
        return exc.exit_code
    except MLOpsError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
