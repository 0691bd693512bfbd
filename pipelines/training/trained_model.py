"""The trained model as the train step hands it to the export step: ``model.pt`` and ``training.json``
in the out dir.

Weights, architecture, vocabularies and the decision threshold in one file, readable with
``torch.load(weights_only=True)`` (no pickled code), written by rank 0 only; beside it the summary
of the run, whose fingerprint and hashes the ONNX file records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, ValidationError

from mlops.contract import DataContract
from mlops.errors import InputError
from mlops.model import TabularMLP
from pipelines.training.calibrators import Calibrator

MODEL_FILE = "model.pt"
SUMMARY_FILE = "training.json"


class TrainingSummary(BaseModel):
    """``training.json``: the run as the train step hands it over (to the export step, and to a person)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fingerprint: str  # the training fingerprint: settings, data and contract
    data_sha256: dict[str, str]  # split name -> file hash
    best_epoch: int
    epochs_run: int
    stop_reason: str
    train_seconds: float
    rows_per_epoch: int
    threshold: float
    device: str
    precision: str
    world_size: int
    params: dict[str, Any]  # the TrainParams it trained with (another family: that family's params)
    # Which family's files the out dir holds (the export step loads them through it); runs written
    # before families existed were MLPs.
    family: str = "mlp"


@dataclass(frozen=True)
class TrainedModel:
    model: TabularMLP
    vocabs: dict[str, list[str]]
    threshold: float
    # An isotonic map after the network's logit; None: the calibration in the model's buffer (Platt or none).
    calibrator: Calibrator | None = None


def save_trained(path: Path, model: TabularMLP, vocabs: dict[str, list[str]], threshold: float,
                 hidden_sizes: tuple[int, ...], dropout: float, calibrator: Calibrator | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    bundle: dict[str, Any] = {"state_dict": model.state_dict(), "vocabs": vocabs, "threshold": threshold,
                              "hidden_sizes": list(hidden_sizes), "dropout": dropout}
    if calibrator is not None:  # only then: a file with the calibration in its buffer stays as it always was
        bundle["calibrator"] = calibrator.to_dict()
    torch.save(bundle, path)
    return path


def load_trained(path: Path, contract: DataContract) -> TrainedModel:
    if not path.is_file():
        raise InputError(f"no trained model at {path}; run the train step first")
    bundle = torch.load(path, map_location="cpu", weights_only=True)
    model = TabularMLP.for_contract(contract, bundle["vocabs"], tuple(bundle["hidden_sizes"]), bundle["dropout"])
    model.load_state_dict(bundle["state_dict"])
    calibrator = Calibrator.from_dict(bundle["calibrator"]) if "calibrator" in bundle else None
    return TrainedModel(model=model.eval(), vocabs=bundle["vocabs"], threshold=float(bundle["threshold"]),
                        calibrator=calibrator)


def write_summary(out_dir: Path, summary: TrainingSummary) -> Path:
    path = out_dir / SUMMARY_FILE
    path.write_text(summary.model_dump_json(indent=2))
    return path


def read_summary(out_dir: Path) -> TrainingSummary:
    path = out_dir / SUMMARY_FILE
    if not path.is_file():
        raise InputError(f"no training summary at {path}; run the train step first")
    try:
        return TrainingSummary.model_validate_json(path.read_text())
    except ValidationError as exc:
        raise InputError(f"{path} is not a training summary: {exc.errors()[0]['msg']}", field=str(path)) from exc


def onnx_metadata(out_dir: Path, contract: DataContract) -> dict[str, str]:
    """What the exported file records about its inputs (never a run, so the same inputs give the same
    bytes): the training fingerprint, the contract's hash, which the service checks, and the train split's."""
    summary = read_summary(out_dir)
    return {"training_fingerprint": summary.fingerprint, "contract_sha256": contract.fingerprint,
            "train_sha256": summary.data_sha256["train"]}
