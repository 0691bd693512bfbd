"""The bundled model families, registered for training: ``mlp`` (the default: the platform's own network,
:class:`mlops.model.TabularMLP`, unchanged), ``xgboost`` and ``sklearn`` (their own modules).

The pipeline's train step trains the MLP with the platform's loop (torchrun, checkpoints, SIGTERM, DDP:
:func:`pipelines.training.entry.run_training`), which writes ``model.pt``; :meth:`MLPFamily.fit` is the
same loop in one process, for a caller holding frames.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from mlops.contract import DataContract
from pipelines.settings import PipelineSettings
from pipelines.training.families.interface import (
    FAMILIES,
    FitSummary,
    FittedModel,
    ModelFamily,
    family_class,
    register_family,
)
from pipelines.training.families.models import FittedMLP
from pipelines.training.families.sk import SklearnFamily
from pipelines.training.families.xgb import XGBoostFamily
from pipelines.training.trainer import TrainParams, train_model

__all__ = ["FAMILIES", "MLPFamily", "ModelFamily", "SklearnFamily", "XGBoostFamily", "family_class", "family_for"]


@register_family
class MLPFamily(ModelFamily):
    name = "mlp"
    platform_loop = True

    @property
    def params(self) -> dict[str, Any]:
        return TrainParams.from_settings(self.settings).model_dump(mode="json")

    def fit(self, train: pd.DataFrame, validation: pd.DataFrame,
            contract: DataContract) -> tuple[FittedModel, FitSummary]:
        params = TrainParams.from_settings(self.settings)
        result = train_model(train, validation, contract, params)
        best = result.best
        fitted = FittedMLP(result.trained, contract, params.hidden_sizes, params.dropout)
        return fitted, FitSummary(best_round=result.best_epoch, rounds_run=len(result.history),
                                  stop_reason=result.stop_reason, seconds=result.seconds, device=result.device,
                                  val_pr_auc=best.val_pr_auc, val_roc_auc=best.val_roc_auc)


def family_for(settings: PipelineSettings) -> ModelFamily:
    """The family ``settings.model_family`` names, built from the settings. Here, not in the interface,
    which the export step imports: reading the setting makes it a param of the train stage alone."""
    return family_class(settings.model_family)(settings)
