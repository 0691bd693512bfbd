"""The fitted ``sklearn`` model: the estimator (joblib: it is the user's own code, which only a pickle
carries), the calibration chosen on validation, and its ONNX graph converted by skl2onnx; an estimator skl2onnx
has no converter for stops the export in one line. Training is :mod:`pipelines.training.families.sk`."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pandas as pd

from mlops.contract import DataContract
from mlops.errors import UnconvertibleModelError
from pipelines.training.calibrators import Calibrator
from pipelines.training.families import converted
from pipelines.training.families.interface import FittedModel, register_fitted

MODEL_FILE = "estimator.joblib"
STATE_FILE = "family.json"


def estimator_name(estimator: Any) -> str:
    kind = type(estimator)
    return f"{kind.__module__}.{kind.__qualname__}"


@register_fitted
class FittedSklearn(FittedModel):
    family = "sklearn"

    def __init__(self, estimator: Any, vocabs: dict[str, list[str]], calibrator: Calibrator, threshold: float,
                 contract: DataContract) -> None:
        self.estimator, self.vocabs, self.calibrator, self.threshold = estimator, vocabs, calibrator, threshold
        self.contract = contract

    def uncalibrated_probability(self, frame: pd.DataFrame) -> np.ndarray:
        # float64 of the float32 matrix: the values the graph sees, at the precision scikit-learn computes in.
        features = converted.feature_matrix(frame, self.contract, self.vocabs).astype(np.float64)
        return np.asarray(self.estimator.predict_proba(features)[:, 1], dtype=np.float64)

    def probability(self, frame: pd.DataFrame) -> np.ndarray:
        return converted.calibrated(self.uncalibrated_probability(frame), self.calibrator)

    def scoring_graph(self, contract: DataContract) -> onnx.ModelProto:
        from skl2onnx import to_onnx
        from skl2onnx.common.data_types import FloatTensorType
        from skl2onnx.common.exceptions import MissingConverter, MissingShapeCalculator

        width = len(contract.numeric_inputs) + len(contract.model_inputs.categorical)
        try:
            with warnings.catch_warnings():
                # skl2onnx 1.20's tree converters put Python bools in an ints attribute (missing-value
                # tracks); protobuf 6.33 accepts them with this warning, which is theirs to fix.
                warnings.filterwarnings("ignore", message=r"Field onnx\.AttributeProto\.ints: Expected an int, "
                                        "got a boolean", category=DeprecationWarning)
                # zipmap off: the probabilities as one [batch, 2] tensor, not a list of maps.
                graph = to_onnx(self.estimator, initial_types=[(converted.FEATURES, FloatTensorType([None, width]))],
                                target_opset={"": converted.OPSET, "ai.onnx.ml": converted.ML_OPSET},
                                options={"zipmap": False})
        except (MissingConverter, MissingShapeCalculator) as exc:
            raise UnconvertibleModelError(
                f"skl2onnx cannot convert {estimator_name(self.estimator)}: choose an estimator it converts "
                "(https://onnx.ai/sklearn-onnx/supported.html) or register a converter for it") from exc
        return converted.scoring_graph(graph, graph.graph.output[-1].name, contract, self.calibrator)

    def check_parity(self, onnx_path: Path, frame: pd.DataFrame, contract: DataContract, tolerance: float) -> float:
        return converted.check_converted_parity(self.probability(frame), onnx_path, frame, self.threshold,
                                                estimator_name(self.estimator))

    def feature_importance(self, contract: DataContract) -> dict[str, float]:
        """The estimator's ``feature_importances_`` (impurity-based trees), where it has them."""
        importances = getattr(self.estimator, "feature_importances_", None)
        if importances is None:
            return {}
        return {name: float(v) for name, v in zip(converted.feature_names(contract), importances, strict=True)}

    def save(self, folder: Path) -> None:
        import joblib

        folder.mkdir(parents=True, exist_ok=True)
        joblib.dump(self.estimator, folder / MODEL_FILE)
        (folder / STATE_FILE).write_text(json.dumps({"vocabs": self.vocabs, "calibration": self.calibrator.to_dict(),
                                                     "threshold": self.threshold}))

    @classmethod
    def load(cls, folder: Path, contract: DataContract) -> FittedModel:
        import joblib

        state = json.loads((folder / STATE_FILE).read_text())
        return cls(joblib.load(folder / MODEL_FILE), state["vocabs"], Calibrator.from_dict(state["calibration"]),
                   float(state["threshold"]), contract)
