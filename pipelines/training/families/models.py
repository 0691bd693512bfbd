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
from scipy.special import expit

from mlops.contract import DataContract
from mlops.errors import ExportParityError, InputError
from mlops.inference import OnnxModel, run_in_slices
from mlops.model import TabularMLP, encode
from mlops.onnx_export import NET_PREFIX, OUTPUT_NAME, check_parity, torch_scoring_graph
from pipelines.training.calibrators import Calibrator
from pipelines.training.families.interface import FittedModel, fitted_class, register_fitted
from pipelines.training.families.sk_model import FittedSklearn
from pipelines.training.families.torch_net import UserNetwork
from pipelines.training.families.xgb_model import FittedXGBoost
from pipelines.training.trained_model import MODEL_FILE, TrainedModel, load_trained, read_summary, save_trained

__all__ = ["FittedMLP", "FittedModel", "FittedSklearn", "FittedTorch", "FittedXGBoost", "load_fitted"]


class _LogitOutput(torch.nn.Module):
    """The network's raw score as its output, so an isotonic map can follow it as ONNX nodes."""

    def __init__(self, model: TabularMLP) -> None:
        super().__init__()
        self.model = model

    def forward(self, numeric: torch.Tensor, categorical: torch.Tensor) -> torch.Tensor:
        return self.model.logits(numeric, categorical)


_NET_LOGIT = "net_logit"


def logit_graph_calibrated(model: TabularMLP, contract: DataContract, calibrator: Calibrator) -> onnx.ModelProto:
    """The network's logit graph, its output renamed, then ``calibrator``'s nodes answering the probability."""
    graph = torch_scoring_graph(_LogitOutput(model.to("cpu").eval()), contract)
    for node in graph.graph.node:
        node.output[:] = [_NET_LOGIT if name == OUTPUT_NAME else name for name in node.output]
    nodes, constants = calibrator.onnx_nodes(_NET_LOGIT, OUTPUT_NAME)
    graph.graph.node.extend(nodes)
    graph.graph.initializer.extend(constants)
    return graph


# An isotonic map's steep segments multiply the float32 rounding of the network's logit (about 1e-6 at a
# logit of 10) by their slope, so served and torch-through-the-map may differ beyond the tolerance on a
# few rows of a large test split (4.8e-5 on 450,000 rows) while the graph is right. So the two halves are
# checked apart, each strictly: the graph's logit against torch's, and the graph's map against the numpy
# map on the graph's own logit; and the decisions of the whole must agree on 99.99 % of the rows (ties
# at the threshold, within the tolerance, aside).
MAX_FLIPPED_SHARE = 1e-4


def _logit_and_probability(onnx_path: Path, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The graph's network logit (its inner tensor, exposed for the check) and its served probability."""
    import onnxruntime as ort

    inner = NET_PREFIX + _NET_LOGIT  # the network's tensors are prefixed in the served graph
    graph = onnx.load(str(onnx_path))
    graph.graph.output.append(onnx.helper.make_tensor_value_info(inner, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    probability, logit = run_in_slices(session, [OUTPUT_NAME, inner], OnnxModel(onnx_path).build_feed(frame))
    return (np.asarray(logit, dtype=np.float64).reshape(-1), np.asarray(probability, dtype=np.float64).reshape(-1))


def check_calibrated_parity(logits: np.ndarray, calibrator: Calibrator, onnx_path: Path, frame: pd.DataFrame,
                            threshold: float, tolerance: float) -> float:
    """The larger of |sigmoid(graph logit) - sigmoid(torch logit)| and |graph map - numpy map| on the graph's
    logit over ``frame``; ExportParityError above ``tolerance``, or when the served decisions differ from
    torch-through-the-map's on more than 0.01 % of the rows."""
    graph_logit, served = _logit_and_probability(onnx_path, frame)
    if served.shape != logits.shape:
        raise ExportParityError(f"ONNX output shape {served.shape} != torch output shape {logits.shape}")
    network = float(np.max(np.abs(expit(graph_logit) - expit(logits)), initial=0.0))
    mapped = float(np.max(np.abs(served - calibrator.apply(graph_logit)), initial=0.0))
    reference = calibrator.apply(logits)
    # A row whose reference lies within the tolerance of the threshold is a rounding tie, not a flip (a
    # constant map at the threshold itself: 0.02 in float64 is 0.0199999996 in float32).
    flips = int(np.count_nonzero(((served >= threshold) != (reference >= threshold))
                                 & (np.abs(reference - threshold) > tolerance)))
    allowed = int(len(frame) * MAX_FLIPPED_SHARE)
    if not (network <= tolerance and mapped <= tolerance) or flips > allowed:  # the negation also catches NaN
        raise ExportParityError(f"ONNX export disagrees with torch and its {calibrator.method} map: network max abs "
                                f"diff {network:.3g}, map {mapped:.3g} (tolerance {tolerance:.3g}), {flips} flipped "
                                f"decisions of {len(frame)} (at most {allowed})")
    return max(network, mapped)


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
        if self.trained.calibrator is not None:
            return self.trained.calibrator.apply(self._logits(numeric, categorical))
        return np.asarray(self.trained.model.to("cpu").predict_proba(numeric, categorical), dtype=np.float64)

    def _logits(self, numeric: np.ndarray, categorical: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            logits = self.trained.model.to("cpu").eval().logits(torch.as_tensor(numeric), torch.as_tensor(categorical))
        return np.asarray(logits.numpy(), dtype=np.float64)

    def uncalibrated_probability(self, frame: pd.DataFrame) -> np.ndarray:
        numeric, categorical = encode(frame, self.contract, self.vocabs)
        with torch.no_grad():
            logits = self.trained.model.to("cpu").eval().logits(torch.as_tensor(numeric), torch.as_tensor(categorical))
        result: np.ndarray = torch.sigmoid(logits).numpy()  # float32, as the export step always judged it
        return result

    def scoring_graph(self, contract: DataContract) -> onnx.ModelProto:
        if self.trained.calibrator is None:
            return torch_scoring_graph(self.trained.model, contract)
        return logit_graph_calibrated(self.trained.model, contract, self.trained.calibrator)

    def check_parity(self, onnx_path: Path, frame: pd.DataFrame, contract: DataContract, tolerance: float) -> float:
        if self.trained.calibrator is None:
            return check_parity(self.trained.model, onnx_path, frame, contract, self.vocabs, tolerance)
        numeric, categorical = encode(frame, self.contract, self.vocabs)
        return check_calibrated_parity(self._logits(numeric, categorical), self.trained.calibrator, onnx_path, frame,
                                       self.threshold, tolerance)

    def save(self, folder: Path) -> None:
        save_trained(folder / MODEL_FILE, self.trained.model, self.vocabs, self.threshold, self.hidden_sizes,
                     self.dropout, self.trained.calibrator)

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
        bundle = {"state_dict": self.trained.model.state_dict(), "vocabs": self.vocabs, "threshold": self.threshold,
                  "module": self.module, "params": self.params}
        if self.trained.calibrator is not None:
            bundle["calibrator"] = self.trained.calibrator.to_dict()
        torch.save(bundle, folder / MODEL_FILE)

    @classmethod
    def load(cls, folder: Path, contract: DataContract) -> FittedModel:
        path = folder / MODEL_FILE
        if not path.is_file():
            raise InputError(f"no trained model at {path}; run the train step first")
        bundle = torch.load(path, map_location="cpu", weights_only=True)
        model = UserNetwork.build(bundle["module"], bundle["params"], contract, bundle["vocabs"])
        model.load_state_dict(bundle["state_dict"])
        calibrator = Calibrator.from_dict(bundle["calibrator"]) if "calibrator" in bundle else None
        trained = TrainedModel(model=model.eval(), vocabs=bundle["vocabs"], threshold=float(bundle["threshold"]),
                               calibrator=calibrator)
        return cls(trained, contract, bundle["module"], bundle["params"])


def load_fitted(out_dir: Path, contract: DataContract) -> FittedModel:
    """The model the train step left in ``out_dir``, through the family its ``training.json`` names."""
    return fitted_class(read_summary(out_dir).family).load(out_dir, contract)
