"""What the models converted by onnxmltools or skl2onnx share at export: their feature matrix, the
calibration chosen on validation applied to the score's logit, the ONNX graph around the converted model,
the parity rule for trees.

The feature matrix is the encoded inputs side by side: the numeric inputs as float32 and each categorical
input as its vocabulary index (the MLP's encoding, index 0 for unknown), so the preprocessing head in
front of the graph is the MLP's, unchanged. Trees need no scaling; a scikit-learn Pipeline brings its own.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pandas as pd
from onnx import TensorProto, compose, helper, numpy_helper

from mlops.contract import DataContract
from mlops.errors import ExportParityError
from mlops.inference import OnnxModel
from mlops.model import encode
from mlops.onnx_export import OUTPUT_NAME
from pipelines.training.calibrators import Calibrator

# The converters' newest default-domain opset (onnxmltools 1.16 stops at 15) and the ML domain's that the
# preprocessing head's LabelEncoder (keys_strings) needs; TreeEnsembleClassifier is the same op up to it.
OPSET = 15
ML_OPSET = 3
FEATURES = "features"
_CONVERTED_PREFIX = "model/"
# Probabilities are clipped before the logit so 0 and 1 (a pure leaf) stay finite; float32 holds 1 - 1e-6.
# A margin read straight from the classifier is clipped to the same logits.
_EPS = 1e-6
_MAX_LOGIT = float(np.log((1.0 - _EPS) / _EPS))
# The ONNX-ML classifiers that squash a binary margin with a logistic (skl2onnx's linear models and
# gradient boosting, onnxmltools' XGBoost): asked for no transform, they answer [-margin, margin].
_MARGIN_CLASSIFIERS = {"LinearClassifier", "TreeEnsembleClassifier"}
_CLASS_LABELS = ("classlabels_ints", "classlabels_int64s", "classlabels_strings")


def feature_matrix(frame: pd.DataFrame, contract: DataContract, vocabs: dict[str, list[str]]) -> np.ndarray:
    """[N, k + c] float32: numeric inputs in contract order, then category indices."""
    numeric, categorical = encode(frame, contract, vocabs)
    return np.ascontiguousarray(np.hstack([numeric, categorical.astype(np.float32)]))


def feature_names(contract: DataContract) -> list[str]:
    """The model inputs in :func:`feature_matrix`'s column order."""
    return [*contract.numeric_inputs, *contract.model_inputs.categorical]


def logit(probability: np.ndarray) -> np.ndarray:
    p = np.clip(probability.astype(np.float64), _EPS, 1.0 - _EPS)
    return np.asarray(np.log(p) - np.log1p(-p))


def calibrated(raw: np.ndarray, calibrator: Calibrator) -> np.ndarray:
    """The calibrated probability from the raw probability's logit, float64 (the graph does the same in float32)."""
    return calibrator.apply(logit(raw))


def answer_margins(graph: onnx.GraphProto, probabilities: str) -> bool:
    """Make the binary classifier node that writes ``probabilities`` answer its margin instead, where it
    squashes one with a logistic; True when it did.

    The logit of a float32 probability near 1 is only as exact as 1 - p, a few ulps: one ulp of p
    (which a batch of 1,000 rows and a row alone may round differently) moved the logit by up to 0.04
    and the calibrated score by 2.6e-4. The margin is the logit itself, exact to float32 wherever it is.
    """
    for node in graph.node:
        if probabilities not in node.output or node.domain != "ai.onnx.ml" or node.op_type not in _MARGIN_CLASSIFIERS:
            continue
        attributes = {a.name: a for a in node.attribute}
        transform = attributes.get("post_transform")
        labels = next((attributes[name] for name in _CLASS_LABELS if name in attributes), None)
        binary = labels is not None and len(helper.get_attribute_value(labels)) == 2
        if transform is not None and transform.s == b"LOGISTIC" and binary:
            transform.s = b"NONE"
            return True
    return False


def scoring_graph(converted: onnx.ModelProto, probabilities: str, contract: DataContract,
                  calibrator: Calibrator) -> onnx.ModelProto:
    """``converted`` (one float input [batch, k + c], ``probabilities`` [batch, 2]) inside the graph the
    served file expects: the encoded inputs stacked in, the positive class's logit (its margin where
    :func:`answer_margins` finds one) calibrated out."""
    n_categorical = len(contract.model_inputs.categorical)
    margins = answer_margins(converted.graph, probabilities)
    converted = compose.add_prefix(converted, _CONVERTED_PREFIX)
    inner_input = converted.graph.input[0].name
    inputs = [helper.make_tensor_value_info("numeric", TensorProto.FLOAT, ["batch", len(contract.numeric_inputs)])]
    nodes = []
    if n_categorical:
        inputs.append(helper.make_tensor_value_info("categorical", TensorProto.INT64, ["batch", n_categorical]))
        nodes += [helper.make_node("Cast", ["categorical"], ["categorical_float"], to=TensorProto.FLOAT),
                  helper.make_node("Concat", ["numeric", "categorical_float"], [inner_input], axis=1)]
    else:
        nodes.append(helper.make_node("Identity", ["numeric"], [inner_input]))
    nodes += list(converted.graph.node)
    constants = [numpy_helper.from_array(np.array(1, dtype=np.int64), "positive_column")]
    scores = _CONVERTED_PREFIX + probabilities
    if margins:
        constants += [numpy_helper.from_array(np.array(v, dtype=np.float32), name) for name, v in (
            ("logit_low", -_MAX_LOGIT), ("logit_high", _MAX_LOGIT))]
        nodes += [
            helper.make_node("Gather", [scores, "positive_column"], ["margin"], axis=1),
            helper.make_node("Clip", ["margin", "logit_low", "logit_high"], ["logit"]),
        ]
    else:
        constants += [numpy_helper.from_array(np.array(v, dtype=np.float32), name) for name, v in (
            ("eps_low", _EPS), ("eps_high", 1.0 - _EPS), ("one", 1.0))]
        nodes += [
            helper.make_node("Gather", [scores, "positive_column"], ["raw"], axis=1),
            helper.make_node("Clip", ["raw", "eps_low", "eps_high"], ["clipped"]),
            helper.make_node("Sub", ["one", "clipped"], ["complement"]),
            helper.make_node("Div", ["clipped", "complement"], ["odds"]),
            helper.make_node("Log", ["odds"], ["logit"]),
        ]
    calibration_nodes, calibration_constants = calibrator.onnx_nodes("logit", OUTPUT_NAME)
    nodes += calibration_nodes
    constants += calibration_constants
    output = helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch"])
    graph = helper.make_graph(nodes, "family", inputs, [output],
                              initializer=[*converted.graph.initializer, *constants])
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", ML_OPSET)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=converted.ir_version)


# Parity of a converted model. The graph computes in float32 what the fitted model computes in float64
# (scikit-learn's thresholds and sums; Platt's logit): within 1e-4 on a probability, three orders of
# magnitude above what float32 rounding of a few hundred leaf sums leaves. A threshold that rounds onto
# a feature value in float32 sends that row down the other branch (a tie), and its score then differs by
# a whole leaf: such rows may be at most 0.01 % of the test split, and decisions must agree on 99.99 %.
TREE_TOLERANCE = 1e-4
MAX_DISAGREEING_SHARE = 1e-4


def check_converted_parity(expected: np.ndarray, onnx_path: Path, frame: pd.DataFrame,
                           threshold: float, name: str) -> float:
    """Max |fitted - ONNX| over the rows within :data:`TREE_TOLERANCE` (the rest are ties, counted);
    raises ExportParityError when ties or flipped decisions pass 0.01 % of ``frame``'s rows."""
    actual = OnnxModel(onnx_path).predict_proba(frame).astype(np.float64)
    if actual.shape != expected.shape:
        raise ExportParityError(f"ONNX output shape {actual.shape} != {name} output shape {expected.shape}")
    diff = np.abs(actual - expected)
    allowed = int(len(frame) * MAX_DISAGREEING_SHARE)
    ties = int(np.count_nonzero(~(diff <= TREE_TOLERANCE)))  # NaN counts as a tie
    flips = int(np.count_nonzero((actual >= threshold) != (expected >= threshold)))
    if ties > allowed or flips > allowed:
        raise ExportParityError(
            f"ONNX export disagrees with the fitted {name} model: {ties} rows beyond {TREE_TOLERANCE:.0e} and "
            f"{flips} flipped decisions of {len(frame)} (at most {allowed} allowed, 0.01 %)")
    within = diff[diff <= TREE_TOLERANCE]
    return float(np.max(within, initial=0.0))
