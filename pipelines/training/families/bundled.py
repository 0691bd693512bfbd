"""The bundled model families, registered for training: ``mlp`` (the default: the platform's own network,
:class:`mlops.model.TabularMLP`, unchanged), ``torch`` (a data scientist's own module in the same loop),
``xgboost`` and ``sklearn`` (their own modules).

``mlp`` and ``torch`` are :class:`LoopFamily`: the pipeline's train step trains them with the platform's
loop (torchrun, checkpoints, SIGTERM, DDP: :func:`pipelines.training.entry.run_training`), which writes
``model.pt``; :meth:`LoopFamily.fit` is the same loop in one process, for a caller holding frames.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import pandas as pd

from mlops.contract import DataContract
from mlops.errors import ConfigError
from mlops.model import TabularMLP, fit_vocabularies
from pipelines.settings import PipelineSettings
from pipelines.training.families.interface import (
    FAMILIES,
    FitSummary,
    FittedModel,
    ModelFamily,
    family_class,
    register_family,
)
from pipelines.training.families.models import FittedMLP, FittedTorch
from pipelines.training.families.sk import SklearnFamily
from pipelines.training.families.torch_net import UserNetwork
from pipelines.training.families.xgb import XGBoostFamily
from pipelines.training.trainer import TrainParams, TrainResult, train_model

__all__ = ["FAMILIES", "LoopFamily", "MLPFamily", "ModelFamily", "SklearnFamily", "TorchFamily", "XGBoostFamily",
           "family_class", "family_for"]


class LoopFamily(ModelFamily):
    """A family the platform's torch loop trains: it names the network, the loop does the rest."""

    platform_loop = True

    def network_builder(self, contract: DataContract,
                        vocabs: dict[str, list[str]]) -> Callable[[], TabularMLP] | None:
        """What builds the network the loop trains (after seeding, on every rank); None: the MLP the settings
        describe. Raises ConfigError here, before any data is read, where the network cannot be built."""
        return None

    def own_params(self) -> dict[str, Any] | None:
        """What decides the weights beyond the loop's settings, for the fingerprint and MLflow; None for the
        MLP, whose settings are its params: its fingerprint (the ONNX file records it) and run stay as they were."""
        return None

    @abstractmethod
    def fitted(self, result: TrainResult, params: TrainParams, contract: DataContract) -> FittedModel:
        """The trained network as the export step loads it."""

    def fit(self, train: pd.DataFrame, validation: pd.DataFrame,
            contract: DataContract) -> tuple[FittedModel, FitSummary]:
        params = TrainParams.from_settings(self.settings)
        network = self.network_builder(contract, fit_vocabularies(contract))
        result = train_model(train, validation, contract, params, network=network,
                             calibration=self.settings.calibration)
        best = result.best
        return self.fitted(result, params, contract), FitSummary(
            best_round=result.best_epoch, rounds_run=len(result.history), stop_reason=result.stop_reason,
            seconds=result.seconds, device=result.device, val_pr_auc=best.val_pr_auc, val_roc_auc=best.val_roc_auc,
            calibration=result.calibration)


@register_family
class MLPFamily(LoopFamily):
    name = "mlp"

    @property
    def params(self) -> dict[str, Any]:
        return TrainParams.from_settings(self.settings).model_dump(mode="json")

    def fitted(self, result: TrainResult, params: TrainParams, contract: DataContract) -> FittedModel:
        return FittedMLP(result.trained, contract, params.hidden_sizes, params.dropout)


@register_family
class TorchFamily(LoopFamily):
    """``MLOPS_MODEL_PARAMS='{"module": "my_models.nets:Wide", ...}'``: the module by import path, the other
    keys its constructor's; the loop's own settings (epochs, batch size, learning rate, ...) as for the MLP."""

    name = "torch"

    @property
    def module(self) -> str:
        path = self.settings.model_params.get("module")
        if not isinstance(path, str) or not path:
            raise ConfigError('the torch family needs its module in MLOPS_MODEL_PARAMS, e.g. '
                              '{"module": "my_models.nets:Wide"}', field="model_params")
        return path

    @property
    def module_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.settings.model_params.items() if k != "module"}

    @property
    def params(self) -> dict[str, Any]:
        return {"module": self.module, **self.module_params}

    def network_builder(self, contract: DataContract, vocabs: dict[str, list[str]]) -> Callable[[], TabularMLP]:
        path, params = self.module, self.module_params
        UserNetwork.build(path, params, contract, vocabs).probe(path, len(contract.model_inputs.categorical))
        return lambda: UserNetwork.build(path, params, contract, vocabs)

    def own_params(self) -> dict[str, Any]:
        return self.params

    def fitted(self, result: TrainResult, params: TrainParams, contract: DataContract) -> FittedModel:
        return FittedTorch(result.trained, contract, self.module, self.module_params)


def family_for(settings: PipelineSettings) -> ModelFamily:
    """The family ``settings.model_family`` names, built from the settings. Here, not in the interface,
    which the export step imports: reading the setting makes it a param of the train stage alone."""
    return family_class(settings.model_family)(settings)
