"""The fitted models of the bundled families, registered for the export step, which imports only this
(never a family's training code, so its stage depends on no training setting)."""

from __future__ import annotations

from pathlib import Path

from mlops.contract import DataContract
from pipelines.training.families.interface import FittedModel, fitted_class
from pipelines.training.families.mlp_model import FittedMLP
from pipelines.training.families.sk_model import FittedSklearn
from pipelines.training.families.xgb_model import FittedXGBoost
from pipelines.training.trained_model import read_summary

__all__ = ["FittedMLP", "FittedModel", "FittedSklearn", "FittedXGBoost", "load_fitted"]


def load_fitted(out_dir: Path, contract: DataContract) -> FittedModel:
    """The model the train step left in ``out_dir``, through the family its ``training.json`` names."""
    return fitted_class(read_summary(out_dir).family).load(out_dir, contract)
