"""The fitted models of the bundled families, registered for the export step, which imports only this
module (never a family's training code, so its stage depends on no training setting): the ``mlp`` here,
exported as it always was (the torch graph, parity against torch at the ``parity_tolerance`` setting), the
``torch`` family's user module here too (exported alike), ``xgboost`` and ``sklearn`` in their own modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd
import torch

from mlops.contract import DataContract
from mlops.errors import InputError
from mlops.model import encode
from mlops.onnx_export import check_parity, torch_scoring_graph
from pipelines.training.families.interface import FittedModel, fitted_class, register_fitted
from pipelines.training.families.sk_model import FittedSklearn
from pipelines.training.families.torch_net import UserNetwork
from pipelines.training.families.xgb_model import FittedXGBoost
from pipelines.training.trained_model import MODEL_FILE, TrainedModel, load_trained, read_summary, save_trained

__all__ = ["FittedMLP", "FittedModel", "FittedSklearn", "FittedTorch", "FittedXGBoost", "load_fitted"]


@register_fitted
class FittedMLP(FittedModel):
    family = "mlp"

    def __init__(self, trained: TrainedModel, contract: DataContract, hidden_sizes: tuple[int, ...] = (),
                 dropout: float = 0.0) -> None:
        self.trained, self.contract = trained, contract
        self.vocabs, self.threshold = trained.vocabs, trained.threshold
        self.hidden_sizes, self.dropout = hidden_sizes, dropout  # the architecture save() records

    def probability(self, frame: pd.DataFrame) -> np.ndarray:
        numeric, categorical = encode(frame, self.contract, self.vocabs)
        return np.asarray(self.trained.model.to("cpu").predict_proba(numeric, categorical), dtype=np.float64)

    def uncalibrated_probability(self, frame: pd.DataFrame) -> np.ndarray:
        numeric, categorical = encode(frame, self.contract, self.vocabs)
        with torch.no_grad():
            logits = self.trained.model.to("cpu").eval().logits(torch.as_tensor(numeric), torch.as_tensor(categorical))
        result: np.ndarray = torch.sigmoid(logits).numpy()  # float32, as the export step always judged it
        return result

    def scoring_graph(self, contract: DataContract) -> onnx.ModelProto:
        return torch_scoring_graph(self.trained.model, contract)

    def check_parity(self, onnx_path: Path, frame: pd.DataFrame, contract: DataContract, tolerance: float) -> float:
        return check_parity(self.trained.model, onnx_path, frame, contract, self.vocabs, tolerance)

    def save(self, folder: Path) -> None:
        save_trained(folder / MODEL_FILE, self.trained.model, self.vocabs, self.threshold, self.hidden_sizes,
                     self.dropout)

    @classmethod
    def load(cls, folder: Path, contract: DataContract) -> FittedModel:
        trained = load_trained(folder / MODEL_FILE, contract)
        hidden = tuple(m.out_features for m in trained.model.mlp if isinstance(m, torch.nn.Linear))[:-1]
        dropout = next((m.p for m in trained.model.mlp if isinstance(m, torch.nn.Dropout)), 0.0)
        return cls(trained, contract, hidden, dropout)


@register_fitted
class FittedTorch(FittedMLP):
    """A user's module in the MLP's wrapper (:class:`UserNetwork`): exported and checked as the MLP is; its
    file names the module and its params, so loading imports the user's code again (no pickle)."""

    family = "torch"

    def __init__(self, trained: TrainedModel, contract: DataContract, module: str, params: dict[str, Any]) -> None:
        super().__init__(trained, contract)
        self.module, self.params = module, params

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"state_dict": self.trained.model.state_dict(), "vocabs": self.vocabs,
                    "threshold": self.threshold, "module": self.module, "params": self.params}, folder / MODEL_FILE)

    @classmethod
    def load(cls, folder: Path, contract: DataContract) -> FittedModel:
        path = folder / MODEL_FILE
        if not path.is_file():
            raise InputError(f"no trained model at {path}; run the train step first")
        bundle = torch.load(path, map_location="cpu", weights_only=True)
        model = UserNetwork.build(bundle["module"], bundle["params"], contract, bundle["vocabs"])
        model.load_state_dict(bundle["state_dict"])
        trained = TrainedModel(model=model.eval(), vocabs=bundle["vocabs"], threshold=float(bundle["threshold"]))
        return cls(trained, contract, bundle["module"], bundle["params"])


def load_fitted(out_dir: Path, contract: DataContract) -> FittedModel:
    """The model the train step left in ``out_dir``, through the family its ``training.json`` names."""
    return fitted_class(read_summary(out_dir).family).load(out_dir, contract)
