"""The bundled model families, registered for training: ``mlp`` (the default), ``xgboost``, ``sklearn``."""

from __future__ import annotations

from pipelines.settings import PipelineSettings
from pipelines.training.families.interface import FAMILIES, ModelFamily, family_class
from pipelines.training.families.mlp import MLPFamily
from pipelines.training.families.sk import SklearnFamily
from pipelines.training.families.xgb import XGBoostFamily

__all__ = ["FAMILIES", "MLPFamily", "ModelFamily", "SklearnFamily", "XGBoostFamily", "family_class", "family_for"]


def family_for(settings: PipelineSettings) -> ModelFamily:
    """The family ``settings.model_family`` names, built from the settings. Here, not in the interface,
    which the export step imports: reading the setting makes it a param of the train stage alone."""
    return family_class(settings.model_family)(settings)
