"""``mlp``: the platform's own network (:class:`mlops.model.TabularMLP`), the default, unchanged.

The pipeline's train step trains it with the platform's loop (torchrun, checkpoints, SIGTERM, DDP:
:func:`pipelines.training.entry.run_training`), which writes ``model.pt``; :meth:`MLPFamily.fit` is the
same loop in one process, for a caller holding frames. The fitted model and its export: :mod:`.mlp_model`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from mlops.contract import DataContract
from pipelines.training.families.interface import FitSummary, FittedModel, ModelFamily, register_family
from pipelines.training.families.mlp_model import FittedMLP
from pipelines.training.trainer import TrainParams, train_model


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
