"""The trained model as the train step hands it to the export step: ``model.pt`` in the out dir.

Weights, architecture, vocabularies and the decision threshold in one file, readable with
``torch.load(weights_only=True)`` (no pickled code), written by rank 0 only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mlops.contract import DataContract
from mlops.errors import InputError
from mlops.model import FraudMLP

MODEL_FILE = "model.pt"


@dataclass(frozen=True)
class TrainedModel:
    model: FraudMLP
    vocabs: dict[str, list[str]]
    threshold: float


def save_trained(path: Path, model: FraudMLP, vocabs: dict[str, list[str]], threshold: float,
                 hidden_sizes: tuple[int, ...], dropout: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "vocabs": vocabs, "threshold": threshold,
                "hidden_sizes": list(hidden_sizes), "dropout": dropout}, path)
    return path


def load_trained(path: Path, contract: DataContract) -> TrainedModel:
    if not path.is_file():
        raise InputError(f"no trained model at {path}; run the train step first")
    bundle = torch.load(path, map_location="cpu", weights_only=True)
    model = FraudMLP.for_contract(contract, bundle["vocabs"], tuple(bundle["hidden_sizes"]), bundle["dropout"])
    model.load_state_dict(bundle["state_dict"])
    return TrainedModel(model=model.eval(), vocabs=bundle["vocabs"], threshold=float(bundle["threshold"]))
