"""The contract's optional ``model:`` section: which model family a data set trains by default, with
its params and calibration (docs/own-model.md). Checked without importing any training library."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from mlops.errors import ConfigError
from mlops.validation_errors import first_field, one_line
from mlops.yaml_text import YAMLError, parse_yaml

CalibrationSetting = Literal["auto", "platt", "isotonic", "none"]
# The model families a contract may name: the bundled ones; a family registered by the training code
# (pipelines.training.families.interface.register_family) adds its name here.
MODEL_FAMILIES: set[str] = {"mlp", "torch", "xgboost", "sklearn"}
# ``module`` of the torch family: a class by import path, ``package.module:Class``.
_IMPORT_PATH = r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$"


class ModelSection(BaseModel):
    """The contract's optional ``model:`` section: the family a data set trains by default, its params and
    calibration. A setting (``MLOPS_MODEL_FAMILY``, ``MLOPS_MODEL_PARAMS``, ``MLOPS_CALIBRATION`` or
    params.yaml) wins over it; :func:`model_section` reads it for the settings. Its params
    and calibration apply to its own family only (another family set by a setting starts from its defaults).

    Checked here without importing any training library: the family is a registered one, ``mlp`` takes no
    params (its settings are its params), ``torch`` names its ``module`` and ``sklearn`` its ``estimator``
    as import paths. Whatever else a family refuses stops the train step before any data is read.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    family: str
    params: dict[str, Any] = {}
    calibration: CalibrationSetting | None = None

    @field_validator("family")
    @classmethod
    def _registered(cls, family: str) -> str:
        if family not in MODEL_FAMILIES:
            raise ValueError(f"unknown model family {family!r}; registered: {', '.join(sorted(MODEL_FAMILIES))}")
        return family

    @field_validator("params")
    @classmethod
    def _params_fit_family(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        family = info.data.get("family")  # absent when the family itself was refused
        if family == "mlp" and params:
            raise ValueError(f"the mlp family takes no params (got {sorted(params)}): its settings are its params "
                             "(MLOPS_HIDDEN_SIZES, MLOPS_MAX_EPOCHS, ...)")
        if family == "torch":
            module = params.get("module")
            if not isinstance(module, str) or not re.match(_IMPORT_PATH, module):
                raise ValueError(f"the torch family needs 'module', a class by import path such as "
                                 f"'my_models.nets:Wide' (got {module!r})")
        if family == "sklearn" and "estimator" in params:
            estimator = params["estimator"]
            if not isinstance(estimator, str) or not re.match(_IMPORT_PATH, estimator):
                raise ValueError(f"the sklearn family's 'estimator' is a class or function by import path such as "
                                 f"'sklearn.linear_model.LogisticRegression' (got {estimator!r})")
        try:
            json.dumps(params, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"params must be plain values (numbers, strings, lists, mappings): {exc}") from exc
        return params


def model_section(path: Path) -> ModelSection | None:
    """The ``model:`` section of the contract at ``path`` alone (the settings read it; the rest of the contract
    is checked by whoever loads it); None where the file has none or cannot be read as YAML."""
    try:
        raw = parse_yaml(Path(path).read_text())
    except (OSError, YAMLError):
        return None
    section = raw.get("model") if isinstance(raw, dict) else None
    if section is None:
        return None
    try:
        return ModelSection.model_validate(section)
    except ValidationError as exc:
        raise ConfigError(f"contract file {path} is invalid: {one_line(exc, 'model')}",
                          field=first_field(exc, "model")) from exc
