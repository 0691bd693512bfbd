"""The fitted ``xgboost`` model: XGBoost's own JSON (no pickle), the calibration chosen on validation, and its
ONNX graph converted by onnxmltools. Training is :mod:`pipelines.training.families.xgb`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd

from mlops.contract import DataContract
from pipelines.training.calibrators import Calibrator
from pipelines.training.families import converted
from pipelines.training.families.interface import FittedModel, register_fitted

MODEL_FILE = "xgboost.json"
STATE_FILE = "family.json"


@register_fitted
class FittedXGBoost(FittedModel):
    family = "xgboost"

    def __init__(self, model: Any, vocabs: dict[str, list[str]], calibrator: Calibrator, threshold: float,
                 contract: DataContract) -> None:
        self.model, self.vocabs, self.calibrator = model, vocabs, calibrator  # an XGBClassifier
        self.threshold = threshold
        self.contract = contract

    def uncalibrated_probability(self, frame: pd.DataFrame) -> np.ndarray:
        features = converted.feature_matrix(frame, self.contract, self.vocabs)
        return np.asarray(self.model.predict_proba(features)[:, 1], dtype=np.float64)

    def probability(self, frame: pd.DataFrame) -> np.ndarray:
        return converted.calibrated(self.uncalibrated_probability(frame), self.calibrator)

    def scoring_graph(self, contract: DataContract) -> onnx.ModelProto:
        from onnxmltools import convert_xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType

        width = len(contract.numeric_inputs) + len(contract.model_inputs.categorical)
        graph = convert_xgboost(self.model, initial_types=[(converted.FEATURES, FloatTensorType([None, width]))],
                                target_opset=converted.OPSET)
        return converted.scoring_graph(graph, "probabilities", contract, self.calibrator)

    def check_parity(self, onnx_path: Path, frame: pd.DataFrame, contract: DataContract, tolerance: float) -> float:
        return converted.check_converted_parity(self.probability(frame), onnx_path, frame, self.threshold,
                                                "xgboost")

    def feature_importance(self, contract: DataContract) -> dict[str, float]:
        """XGBoost's ``gain`` (the mean loss reduction of the splits on an input; 0 for an unused one).
        Trained on an unnamed matrix, XGBoost calls column i ``f<i>``."""
        gains = self.model.get_booster().get_score(importance_type="gain")
        return {name: float(gains.get(f"f{i}", 0.0)) for i, name in enumerate(converted.feature_names(contract))}

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.model.save_model(folder / MODEL_FILE)
        (folder / STATE_FILE).write_text(json.dumps({"vocabs": self.vocabs, "calibration": self.calibrator.to_dict(),
                                                     "threshold": self.threshold}))

    @classmethod
    def load(cls, folder: Path, contract: DataContract) -> FittedModel:
        from xgboost import XGBClassifier

        model = XGBClassifier()
        model.load_model(folder / MODEL_FILE)
        # The loaded copy scores where export runs: on the CPU, whatever device trained it.
        model.set_params(device="cpu")
        state = json.loads((folder / STATE_FILE).read_text())
        return cls(model, state["vocabs"], Calibrator.from_dict(state["calibration"]), float(state["threshold"]),
                   contract)
