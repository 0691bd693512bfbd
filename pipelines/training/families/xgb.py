"""``xgboost``: gradient-boosted trees (hist method) on the GPU when torch sees one, else the CPU, through
the same code; early stopping on validation PR-AUC; positives weighted by the negative/positive ratio;
calibration chosen on validation. The fitted model and its export: :mod:`.xgb_model`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.model import fit_vocabularies
from pipelines.training.families import converted
from pipelines.training.families.interface import FitSummary, FittedModel, ModelFamily, register_family
from pipelines.training.families.xgb_model import FittedXGBoost
from pipelines.training.family_training import fit_calibration, labels, ranking_scores
from pipelines.training.thresholds import between_scores_threshold

# Defaults a data scientist would start from on tabular fraud data; any XGBClassifier parameter overrides.
DEFAULTS: dict[str, Any] = {"n_estimators": 500, "learning_rate": 0.1, "max_depth": 6,
                            "early_stopping_rounds": 30, "min_child_weight": 1.0, "subsample": 1.0}


def _device(requested: str) -> str:
    """``cuda`` where torch sees a GPU (or it is asked for), else ``cpu``: XGBoost's own flag, one code path."""
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@register_family
class XGBoostFamily(ModelFamily):
    name = "xgboost"

    @property
    def params(self) -> dict[str, Any]:
        return {**DEFAULTS, **self.settings.model_params}

    def fit(self, train: pd.DataFrame, validation: pd.DataFrame,
            contract: DataContract) -> tuple[FittedModel, FitSummary]:
        from xgboost import XGBClassifier

        vocabs = fit_vocabularies(contract)
        x_train, y_train = converted.feature_matrix(train, contract, vocabs), labels(train, contract)
        x_val, y_val = converted.feature_matrix(validation, contract, vocabs), labels(validation, contract)
        positives = int(y_train.sum())
        if positives == 0:
            raise ConfigError("the train split holds no positive label; xgboost cannot weight the classes")
        device = str(self.params.get("device", _device(self.settings.device)))
        # The platform's choices first: a data scientist's params override any of them.
        chosen = {"tree_method": "hist", "device": device, "eval_metric": "aucpr",
                  "scale_pos_weight": (len(y_train) - positives) / positives, "random_state": self.settings.seed}
        model = XGBClassifier(**{**chosen, **self.params})
        started = time.monotonic()
        model.fit(x_train, y_train, eval_set=[(x_val, y_val)], verbose=False)
        seconds = time.monotonic() - started
        # Scoring numpy arrays on the GPU would copy them there first (XGBoost warns); the CPU is quick.
        model.set_params(device="cpu")
        raw = np.asarray(model.predict_proba(x_val)[:, 1], dtype=np.float64)
        choice = fit_calibration(raw, y_val, self.settings)
        threshold = between_scores_threshold(y_val, converted.calibrated(raw, choice.calibrator))
        pr_auc, roc_auc = ranking_scores(y_val, raw)
        rounds = model.get_booster().num_boosted_rounds()
        best = int(getattr(model, "best_iteration", rounds - 1)) + 1
        stop = "early_stopping" if rounds < int(self.params["n_estimators"]) else "max_rounds"
        fitted = FittedXGBoost(model, vocabs, choice.calibrator, threshold, contract)
        return fitted, FitSummary(best_round=best, rounds_run=rounds, stop_reason=stop, seconds=seconds,
                                  device=device, val_pr_auc=pr_auc, val_roc_auc=roc_auc, calibration=choice)
