"""The bundled model families, registered for training: ``mlp`` (the default), ``xgboost``, ``sklearn``."""

from __future__ import annotations

from pipelines.training.families.interface import FAMILIES, ModelFamily, family_class, family_for
from pipelines.training.families.mlp import MLPFamily
from pipelines.training.families.sk import SklearnFamily
from pipelines.training.families.xgb import XGBoostFamily

__all__ = ["FAMILIES", "MLPFamily", "ModelFamily", "SklearnFamily", "XGBoostFamily", "family_class", "family_for"]
