"""The model family: the one interface every kind of model trains and exports through.

A family turns the train and validation splits (frames with the contract's model inputs and the label)
and its parameters into a :class:`FittedModel`, which answers the calibrated probability itself and as
an ONNX scoring graph over the encoded inputs; :func:`mlops.onnx_export.write_served_graph` puts the
preprocessing head in front, so the served file takes the same raw fields and answers the same output
whatever the family. Families register under a name; ``PipelineSettings.model_family`` names the one a
run uses and :func:`pipelines.training.families.bundled.family_for` builds it. Adding a family is a
:class:`ModelFamily` subclass with :func:`register_family` (its training) and a :class:`FittedModel`
subclass with :func:`register_fitted` (what the export step loads), in two modules: the export step's
stage then depends on no training code or setting.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from mlops.contract import DataContract
from mlops.contract_model import MODEL_FAMILIES
from mlops.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import onnx
    import pandas as pd

    from pipelines.settings import PipelineSettings
    from pipelines.training.calibrators import CalibrationChoice


@dataclass(frozen=True)
class FitSummary:
    """How a fit went, for training.json and MLflow: rounds (epochs, boosting rounds; 1 for a plain fit)."""

    best_round: int
    rounds_run: int
    stop_reason: str
    seconds: float
    device: str
    val_pr_auc: float
    val_roc_auc: float
    calibration: CalibrationChoice | None = None  # the calibration chosen on validation, as MLflow logs it


class FittedModel(ABC):
    """A trained model of some family: its own probabilities (the parity reference) and its ONNX graph."""

    family: ClassVar[str]
    vocabs: dict[str, list[str]]
    threshold: float  # the decision threshold on the calibrated probability, chosen on validation

    @abstractmethod
    def probability(self, frame: pd.DataFrame) -> np.ndarray:
        """The calibrated probability of a positive per row, computed by the fitted model itself, [N]."""

    @abstractmethod
    def uncalibrated_probability(self, frame: pd.DataFrame) -> np.ndarray:
        """The score before calibration, [N]: the baseline calibration is judged against."""

    @abstractmethod
    def scoring_graph(self, contract: DataContract) -> onnx.ModelProto:
        """ONNX graph: ``numeric`` float32 [batch, k] (+ ``categorical`` int64 [batch, c]) -> ``probability``."""

    @abstractmethod
    def check_parity(self, onnx_path: Path, frame: pd.DataFrame, contract: DataContract, tolerance: float) -> float:
        """Max |fitted - ONNX| probability over ``frame`` within the family's stated tolerance; raises
        ExportParityError otherwise. ``tolerance`` is the setting the MLP checks against."""

    @abstractmethod
    def save(self, folder: Path) -> None:
        """Write what :meth:`load` reads back into ``folder``."""

    @classmethod
    @abstractmethod
    def load(cls, folder: Path, contract: DataContract) -> FittedModel:
        """The model :meth:`save` wrote to ``folder``."""

    def feature_importance(self, contract: DataContract) -> dict[str, float]:
        """Model input -> the model's own importance measure (trees: total gain); empty where the family
        has none (a network, a Pipeline)."""
        return {}


class ModelFamily(ABC):
    """Fits one kind of model from frames; registered under :attr:`name`."""

    name: ClassVar[str]
    # True where the platform's own torch loop trains the family (torchrun, checkpoints, DDP): the train
    # step then runs that loop; other families fit in one process through :meth:`fit`.
    platform_loop: ClassVar[bool] = False

    def __init__(self, settings: PipelineSettings) -> None:
        self.settings = settings  # seed, device and the family's own params (model_params)

    @property
    @abstractmethod
    def params(self) -> dict[str, Any]:
        """The parameters the family fits with (its defaults and the settings' overrides), as logged."""

    @abstractmethod
    def fit(self, train: pd.DataFrame, validation: pd.DataFrame,
            contract: DataContract) -> tuple[FittedModel, FitSummary]:
        """Fit on ``train``, stop early and calibrate on ``validation``."""


FAMILIES: dict[str, type[ModelFamily]] = {}
FITTED: dict[str, type[FittedModel]] = {}
F = TypeVar("F", bound=type[ModelFamily])
M = TypeVar("M", bound=type[FittedModel])


def register_fitted(fitted: M) -> M:
    """Class decorator: the export step loads a ``fitted.family`` out dir through ``fitted``. Apart from
    :func:`register_family`, so the export step never imports a family's training code."""
    FITTED[fitted.family] = fitted
    return fitted


def fitted_class(name: str) -> type[FittedModel]:
    """The registered fitted model of family ``name`` (:mod:`pipelines.training.families.models` registers them)."""
    fitted = FITTED.get(name)
    if fitted is None:
        raise ConfigError(f"no model family {name!r} to load; registered: {', '.join(sorted(FITTED))}",
                          field="model_family")
    return fitted


def register_family(family: F) -> F:
    """Class decorator: make ``family`` choosable as ``model_family=<family.name>`` (and in a contract's
    ``model:`` section, in processes that imported it)."""
    if family.name in FAMILIES and FAMILIES[family.name] is not family:
        raise ConfigError(f"a model family named {family.name!r} is registered already")
    FAMILIES[family.name] = family
    MODEL_FAMILIES.add(family.name)  # a contract's model section may name it
    return family


def family_class(name: str) -> type[ModelFamily]:
    """The registered family ``name`` (:mod:`pipelines.training.families.bundled` registers the bundled ones)."""
    family = FAMILIES.get(name)
    if family is None:
        known = ", ".join(sorted(FAMILIES))
        raise ConfigError(f"unknown model family {name!r}; registered: {known}", field="model_family")
    return family
