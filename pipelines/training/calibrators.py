"""Calibration as a choice: none, Platt or isotonic on the score's logit, chosen on validation by log loss.

Class weights push every family's scores up, and a Platt fit assumes the distortion is a sigmoid of the
logit. Where it is not (the MLP under-states its highest scores), an isotonic map fits better; where the
validation split is small, isotonic over-fits and Platt wins. So each method is fitted and scored on
held-out folds of the validation split (out-of-fold log loss, a proper score: an isotonic fit that claims
0 or 1 wrongly pays for it), the best is refitted on the whole split, and the choice is recorded with its
ECE and its top-decile ECE (the scores the estimate before labels leans on most).

A :class:`Calibrator` maps a logit to the probability the same way in numpy (float64, the reference) and
as ONNX nodes (float32) the served graph ends with. Isotonic is a piecewise-linear map over knots that are
float32 numbers, so both sides interpolate between the same points (``np.interp`` here, a segment lookup
in ONNX).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from scipy.special import expit
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedKFold

from mlops.calibration import calibration_report, top_decile_ece
from mlops.errors import ConfigError
from mlops.model import TabularMLP
from pipelines.steps.calibration import fit_platt
from pipelines.training.thresholds import best_f1_threshold

log = logging.getLogger(__name__)
Method = Literal["none", "platt", "isotonic"]
METHODS: tuple[Method, ...] = get_args(Method)
Setting = Literal["auto", "none", "platt", "isotonic"]
DEFAULT_CALIBRATION: Setting = "auto"
FOLDS = 5
# Log loss of a probability of 0 or 1 is infinite: clip as the served logit clips its input.
_EPS = 1e-6


def calibration_entry(setting: str) -> dict[str, str]:
    """The calibration setting's entry in a training fingerprint: two runs differing only in it are not the
    same training (another map, another ONNX graph). None for the default, so the fingerprints of runs
    with it stay what they were before the setting existed."""
    return {} if setting == DEFAULT_CALIBRATION else {"calibration": setting}


@dataclass(frozen=True)
class Calibrator:
    """logit -> calibrated probability. ``platt`` is (scale, bias); ``knots`` (x: logits, y: probabilities)
    is the isotonic map, constant beyond its ends."""

    method: Method
    platt: tuple[float, float] = (1.0, 0.0)
    knots: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())

    def apply(self, logits: np.ndarray) -> np.ndarray:
        z = np.asarray(logits, dtype=np.float64)
        if self.method == "isotonic":
            x, y = (np.asarray(k, dtype=np.float64) for k in self.knots)
            return np.asarray(np.interp(z, x, y))  # np.interp holds the end values beyond the knots
        scale, bias = self.platt if self.method == "platt" else (1.0, 0.0)
        return np.asarray(expit(scale * z + bias))  # no overflow warning for a logit far below zero

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as a family's state file holds it."""
        return {"method": self.method, "platt": list(self.platt), "knots": [list(k) for k in self.knots]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Calibrator:
        x, y = raw["knots"]
        return cls(method=raw["method"], platt=(float(raw["platt"][0]), float(raw["platt"][1])),
                   knots=(tuple(map(float, x)), tuple(map(float, y))))

    def onnx_nodes(self, logit: str, output: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
        """Nodes and initializers mapping the float32 [batch] tensor ``logit`` to ``output`` [batch]."""
        if self.method != "isotonic":
            scale, bias = self.platt if self.method == "platt" else (1.0, 0.0)
            constants = [_f32("platt_scale", scale), _f32("platt_bias", bias)]
            return [helper.make_node("Mul", [logit, "platt_scale"], ["scaled"]),
                    helper.make_node("Add", ["scaled", "platt_bias"], ["shifted"]),
                    helper.make_node("Sigmoid", ["shifted"], [output])], constants
        x = np.asarray(self.knots[0], dtype=np.float32)
        y = np.asarray(self.knots[1], dtype=np.float64)
        # Slopes from the float32 knots themselves: the reference interpolates between the same points.
        slope = np.diff(y) / np.diff(x.astype(np.float64))
        constants = [numpy_helper.from_array(x[0:1], "iso_low"), numpy_helper.from_array(x[-1:], "iso_high"),
                     numpy_helper.from_array(x[1:], "iso_upper"), numpy_helper.from_array(x, "iso_x"),
                     numpy_helper.from_array(y.astype(np.float32), "iso_y"),
                     numpy_helper.from_array(slope.astype(np.float32), "iso_slope"),
                     numpy_helper.from_array(np.array([len(x) - 2], dtype=np.int64), "iso_last_segment"),
                     numpy_helper.from_array(np.array([1], dtype=np.int64), "iso_axis")]
        nodes = [
            # Held at the end values beyond the knots, as np.interp does.
            helper.make_node("Max", [logit, "iso_low"], ["iso_above_low"]),
            helper.make_node("Min", ["iso_above_low", "iso_high"], ["iso_z"]),
            # The segment of each row: how many upper knots it reaches, the last segment at the top end.
            helper.make_node("Unsqueeze", ["iso_z", "iso_axis"], ["iso_column"]),
            helper.make_node("GreaterOrEqual", ["iso_column", "iso_upper"], ["iso_reached"]),
            helper.make_node("Cast", ["iso_reached"], ["iso_reached_count"], to=TensorProto.INT64),
            helper.make_node("ReduceSum", ["iso_reached_count", "iso_axis"], ["iso_count"], keepdims=0),
            helper.make_node("Min", ["iso_count", "iso_last_segment"], ["iso_segment"]),
            helper.make_node("Gather", ["iso_x", "iso_segment"], ["iso_start"]),
            helper.make_node("Gather", ["iso_y", "iso_segment"], ["iso_start_value"]),
            helper.make_node("Gather", ["iso_slope", "iso_segment"], ["iso_segment_slope"]),
            helper.make_node("Sub", ["iso_z", "iso_start"], ["iso_offset"]),
            helper.make_node("Mul", ["iso_offset", "iso_segment_slope"], ["iso_rise"]),
            helper.make_node("Add", ["iso_start_value", "iso_rise"], [output]),
        ]
        return nodes, constants


def _f32(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=np.float32), name)


def fit_method(method: Method, logits: np.ndarray, labels: np.ndarray) -> Calibrator:
    """One method fitted on (logit, label) pairs."""
    if method == "none":
        return Calibrator("none")
    if method == "platt":
        return Calibrator("platt", platt=fit_platt(logits, labels))
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(logits.astype(np.float64), labels)
    # Knots as float32 (what the graph holds); a rounding that merges two knots keeps the first's value.
    x, first = np.unique(np.asarray(iso.X_thresholds_, dtype=np.float32), return_index=True)
    y = np.asarray(iso.y_thresholds_, dtype=np.float64)[first]
    if len(x) == 1:  # a constant map: two knots, so the graph has one segment
        x, y = np.array([x[0], np.nextafter(x[0], np.float32(np.inf))], dtype=np.float32), np.repeat(y, 2)
    return Calibrator("isotonic", knots=(tuple(x.astype(np.float64).tolist()), tuple(y.tolist())))


@dataclass(frozen=True)
class CalibrationChoice:
    """The chosen calibrator and what chose it: each method's out-of-fold log loss on validation, and the
    chosen map's ECE and top-decile ECE on the whole validation split."""

    calibrator: Calibrator
    setting: str
    log_loss: dict[str, float] = field(default_factory=dict)
    val_ece: float = float("nan")
    val_top_decile_ece: float = float("nan")

    @property
    def method(self) -> Method:
        return self.calibrator.method

    def metrics(self) -> dict[str, float]:
        """For MLflow: the chosen map's ECEs and every method's validation log loss."""
        return {"val_ece": self.val_ece, "val_top_decile_ece": self.val_top_decile_ece,
                **{f"val_log_loss_{method}": loss for method, loss in self.log_loss.items()}}


def out_of_fold_log_loss(method: Method, logits: np.ndarray, labels: np.ndarray, seed: int) -> float:
    """Log loss of ``method`` on each validation fold, fitted on the others (stratified, seeded)."""
    folds = min(FOLDS, int(labels.sum()), int(len(labels) - labels.sum()))
    if folds < 2:
        raise ConfigError("the validation split holds fewer than two rows of a class; calibration cannot be "
                          "chosen (set calibration to platt or none)", field="calibration")
    predicted = np.empty(len(labels), dtype=np.float64)
    for fit_rows, held in StratifiedKFold(folds, shuffle=True, random_state=seed).split(logits, labels):
        predicted[held] = fit_method(method, logits[fit_rows], labels[fit_rows]).apply(logits[held])
    return float(log_loss(labels, np.clip(predicted, _EPS, 1 - _EPS), labels=[0, 1]))


def choose_calibration(logits: np.ndarray, labels: np.ndarray, setting: str, seed: int) -> CalibrationChoice:
    """The method ``setting`` names, or (``auto``) the one of least out-of-fold log loss; refitted on all rows."""
    if setting not in get_args(Setting):
        raise ConfigError(f"unknown calibration {setting!r}; choose one of {', '.join(get_args(Setting))}",
                          field="calibration")
    logits, labels = np.asarray(logits, dtype=np.float64), np.asarray(labels, dtype=np.int64)
    losses: dict[str, float] = {}
    if setting == "auto":
        losses = {method: out_of_fold_log_loss(method, logits, labels, seed) for method in METHODS}
        # Ties go to the simpler map (METHODS is ordered by complexity); min keeps the first minimum.
        method: Method = min(METHODS, key=lambda m: losses[m])
    else:
        method = setting  # type: ignore[assignment]  # one of METHODS, checked above
    calibrator = fit_method(method, logits, labels)
    probability = calibrator.apply(logits)
    return CalibrationChoice(calibrator=calibrator, setting=setting, log_loss=losses,
                             val_ece=calibration_report(labels, probability).ece,
                             val_top_decile_ece=top_decile_ece(labels, probability))


def calibrate_network(model: TabularMLP, logits: np.ndarray, labels: np.ndarray, numeric: np.ndarray,
                      categorical: np.ndarray, setting: str, seed: int) -> tuple[CalibrationChoice, np.ndarray, float]:
    """The platform loop's calibration of its trained ``model`` from its validation ``logits``: (choice,
    calibrated validation probabilities, decision threshold). Platt (or none, its identity) goes into the
    network's buffer as it always did, so its forward and graph stay the MLP's; an isotonic map stays beside
    it (the export puts it after the graph's logit) and the buffer keeps the identity."""
    choice = choose_calibration(logits, labels, setting, seed)
    if choice.method == "isotonic":
        calibrated = choice.calibrator.apply(logits)
        log.info("isotonic calibration on validation: %d knots", len(choice.calibrator.knots[0]))
        return choice, calibrated, best_f1_threshold(labels, calibrated)
    scale, bias = choice.calibrator.platt
    model.calibration.copy_(torch.tensor([scale, bias]))
    log.info("%s calibration on validation: scale %.4f, bias %.4f", choice.method, scale, bias)
    calibrated = 1.0 / (1.0 + np.exp(-(scale * logits + bias)))
    # The threshold on what the network itself answers (float32), as it always was.
    return choice, calibrated, best_f1_threshold(labels, model.predict_proba(numeric, categorical))
