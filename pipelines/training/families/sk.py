"""``sklearn``: any scikit-learn classifier or Pipeline, named by import path, with its parameters:

    MLOPS_MODEL_FAMILY=sklearn
    MLOPS_MODEL_PARAMS='{"estimator": "sklearn.ensemble.HistGradientBoostingClassifier", "max_iter": 200}'

``estimator`` is a class or a function returning an estimator (``my_models.pipes:scaled_logistic`` builds
a Pipeline); every other key is passed to it. Where the estimator takes ``class_weight`` and none is
given, positives are weighted by the negative/positive ratio ("balanced"). Converted with skl2onnx;
an estimator it has no converter for stops the export in one line. The fitted model and its export:
:mod:`.sk_model`.
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

from mlops.contract import DataContract
from mlops.errors import ConfigError, TrainingError
from mlops.model import fit_vocabularies
from pipelines.training.calibrators import Calibrator
from pipelines.training.families import converted
from pipelines.training.families.interface import FitSummary, FittedModel, ModelFamily, register_family
from pipelines.training.families.sk_model import FittedSklearn, estimator_name
from pipelines.training.family_training import fit_calibration, labels, ranking_scores
from pipelines.training.thresholds import between_scores_threshold

DEFAULT_ESTIMATOR = "sklearn.ensemble.HistGradientBoostingClassifier"


def import_estimator(path: str) -> Any:
    """``package.module.Name`` or ``package.module:name`` -> the object; a ConfigError naming the path."""
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"sklearn estimator {path!r} does not import: {exc}", field="model_params") from exc


@register_family
class SklearnFamily(ModelFamily):
    name = "sklearn"

    @property
    def params(self) -> dict[str, Any]:
        return {"estimator": DEFAULT_ESTIMATOR, **self.settings.model_params}

    def build(self, positives: int, rows: int) -> Any:
        """The estimator the params name, with class weights where it takes them and none are given."""
        params = self.params
        factory = import_estimator(str(params.pop("estimator")))
        if not callable(factory):
            raise ConfigError(f"sklearn estimator {self.params['estimator']!r} is not a class or a function",
                              field="model_params")
        try:
            accepted: Collection[str] = inspect.signature(factory).parameters
        except (TypeError, ValueError):  # a builtin or C callable without a signature: pass params as given
            accepted = ()
        if "class_weight" in accepted and "class_weight" not in params:
            params["class_weight"] = {0: 1.0, 1: (rows - positives) / positives}
        if "random_state" in accepted and "random_state" not in params:
            params["random_state"] = self.settings.seed
        try:
            estimator = factory(**params)
        except TypeError as exc:
            raise ConfigError(f"sklearn estimator params {params}: {exc}", field="model_params") from exc
        if not hasattr(estimator, "predict_proba"):
            raise ConfigError(f"{estimator_name(estimator)} has no predict_proba; choose a classifier that answers "
                              "probabilities", field="model_params")
        return estimator

    def fit(self, train: pd.DataFrame, validation: pd.DataFrame,
            contract: DataContract) -> tuple[FittedModel, FitSummary]:
        vocabs = fit_vocabularies(contract)
        x_train = converted.feature_matrix(train, contract, vocabs).astype(np.float64)
        y_train, y_val = labels(train, contract), labels(validation, contract)
        positives = int(y_train.sum())
        if positives == 0:
            raise ConfigError("the train split holds no positive label; a classifier cannot be fitted")
        estimator = self.build(positives, len(y_train))
        started = time.monotonic()
        try:
            estimator.fit(x_train, y_train)
        except (TypeError, ValueError) as exc:  # scikit-learn checks its params here (InvalidParameterError)
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"{estimator_name(estimator)} did not fit: {first_line}", field="model_params") from exc
        seconds = time.monotonic() - started
        fitted = FittedSklearn(estimator, vocabs, Calibrator("none"), 0.5, contract)
        raw = fitted.uncalibrated_probability(validation)
        if not np.isfinite(raw).all():
            raise TrainingError(f"{estimator_name(estimator)} answered non-finite probabilities on validation; "
                                "scale its inputs (a Pipeline) or change its parameters")
        choice = fit_calibration(raw, y_val, self.settings)
        fitted.calibrator = choice.calibrator
        fitted.threshold = between_scores_threshold(y_val, converted.calibrated(raw, fitted.calibrator))
        pr_auc, roc_auc = ranking_scores(y_val, raw)
        n_iter = getattr(estimator, "n_iter_", None)  # boosting rounds or solver iterations, where it has them
        rounds = int(n_iter) if isinstance(n_iter, int | np.integer) else 1
        return fitted, FitSummary(best_round=rounds, rounds_run=rounds, stop_reason="fit", seconds=seconds,
                                  device="cpu", val_pr_auc=pr_auc, val_roc_auc=roc_auc, calibration=choice)
