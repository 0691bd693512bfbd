"""The training pipeline's settings: the platform's base plus what only the pipeline reads (training,
export, evaluation and promotion, checkpoints, the demo).

The pipeline's processes (the CLI's pipeline, train and step commands, kfp.local and DVC steps,
torchrun's ranks) construct this class; the settings reach the steps' processes as one serialized
settings record (MLOPS_SETTINGS_JSON), MLOPS_* variables or params.yaml, read back here.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, model_validator

from mlops.contract_model import CalibrationSetting, model_section
from mlops.settings import Settings

# The settings the contract's ``model:`` section may fill: a null in params.yaml leaves them to it.
MODEL_CHOICE_FIELDS = ("model_family", "model_params", "calibration")


class PipelineSettings(Settings):
    """The base settings and the pipeline's own: the model and its training, the promotion gates."""

    promotion_margin: float = Field(default=0.02, ge=0.0, le=1.0,
                                    description="Lower bound of the F1 gain's 95% paired-bootstrap interval needed.")
    promotion_min_pr_auc_lift: float = Field(default=2.0, ge=1.0,
                                             description="A candidate's PR-AUC must be this many times the base rate.")
    rollout: Literal["canary", "direct"] = Field(
        default="canary", description="canary: deploy puts an accepted candidate on staging and a canary at "
        "canary_percent (production moves when the canary judge promotes it); direct: straight to production.")
    canary_percent: float = Field(default=10.0, gt=0, lt=100, description="Share of the traffic (percent) a "
                                  "deployed candidate's canary starts with.")
    model_family: str = Field(default="mlp", description="The model family that trains: a registered name (mlp, "
                              "torch, xgboost, sklearn); unset: the contract's model section's, else mlp; "
                              "docs/own-model.md.")
    model_params: dict[str, Any] = Field(default={}, description="The family's own parameters, JSON in "
                                         "MLOPS_MODEL_PARAMS (mlp: its settings above); unset: the contract's "
                                         "model section's for its family.")
    calibration: CalibrationSetting = Field(
        default="auto", description="How the score is calibrated on validation: auto = the method of least "
        "out-of-fold log loss (none, Platt or isotonic); or that method, forced; unset: the contract's model "
        "section's for its family.")
    seed: int = 42
    max_epochs: int = Field(default=30, ge=1)
    patience: int = Field(default=4, ge=1)
    batch_size: int = Field(default=512, ge=1)
    learning_rate: float = Field(default=2e-3, gt=0)
    parity_tolerance: float = Field(default=1e-5, gt=0)
    device: str = Field(default="auto", pattern="^(auto|cpu|cuda)$")
    hidden_sizes: tuple[int, ...] = Field(default=(64, 32), min_length=1, description="MLP layer widths.")
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    precision: Literal["auto", "fp32", "bf16"] = Field(
        default="auto", description="auto = bf16 autocast on GPUs that support it, fp32 elsewhere."
    )
    compile_model: bool = Field(default=False, description="torch.compile the training module.")
    negative_sample_rate: float = Field(default=1.0, gt=0, le=1, description="Share of negatives each "
                                        "training epoch draws (weighted by its inverse); 1 = all.")
    max_train_seconds: float | None = Field(default=None, gt=0, description="Wall-clock budget of training "
                                            "beside max_epochs; the best epoch so far is kept.")
    max_epoch_rows: int = Field(default=2_000_000, ge=1_000, description="Rows one training epoch draws at "
                                "most: above it each epoch keeps every positive and a fresh sample of the "
                                "negatives (weighted by its inverse).")
    checkpoint_dir: str | None = Field(
        default=None, description="Local path or fsspec URL for training checkpoints; default under home."
    )
    checkpoint_interval_s: float = Field(default=120.0, gt=0, description="Checkpoint at least this often.")
    slice_f1_tolerance: float = Field(
        default=0.1, ge=0.0, le=1.0, description="A slice's F1 may fall this far below production's."
    )
    slice_min_positives: int = Field(default=5, ge=1, description="Slices with fewer positives are not gated.")
    slice_min_rows: int = Field(default=30, ge=1, description="Slices with fewer test rows are not scored "
                                "(marked '(too few rows)' in the model card) nor gated.")
    demo_rows: int = Field(default=30_000, ge=1_000)

    @model_validator(mode="before")
    @classmethod
    def _null_model_choice_is_unset(cls, values: Any) -> Any:
        """``model_family: null`` (params.yaml) is no setting: the contract's model section, else the default."""
        if isinstance(values, dict):
            return {k: v for k, v in values.items() if not (k in MODEL_CHOICE_FIELDS and v is None)}
        return values

    @model_validator(mode="after")
    def _model_choice_from_contract(self) -> Self:
        """Precedence: a setting (an MLOPS_* variable, params.yaml, a parent's settings record), then the
        contract's ``model:`` section, then the defaults. The section's params and calibration go with its
        family: a family chosen by a setting keeps its own defaults. A broken section raises ConfigError
        (exit code 2) naming its field; the rest of the contract is checked by whoever loads it."""
        if self.explicit_model_choice == set(MODEL_CHOICE_FIELDS):
            return self
        section = model_section(self.contract_path)
        if section is None:
            return self
        # Straight into the fields, not by assignment, which would count them as set: model_fields_set
        # keeps saying which of the three a setting gave (for_family reads it).
        chosen = self.__dict__
        if "model_family" not in self.model_fields_set:
            chosen["model_family"] = section.family
        if self.model_family == section.family:
            if "model_params" not in self.model_fields_set:
                chosen["model_params"] = dict(section.params)
            if "calibration" not in self.model_fields_set and section.calibration is not None:
                chosen["calibration"] = section.calibration
        return self

    @property
    def explicit_model_choice(self) -> frozenset[str]:
        """Which of MODEL_CHOICE_FIELDS a setting gave (the others came from the contract or the defaults)."""
        return frozenset(self.model_fields_set) & frozenset(MODEL_CHOICE_FIELDS)

    def for_family(self, family: str) -> Self:
        """These settings as ``MLOPS_MODEL_FAMILY=<family>`` would have made them (``mlops train --family``):
        the params and calibration a setting gave, else the contract section's where it names ``family``,
        else the family's defaults."""
        if family == self.model_family:
            return self
        explicit = self.explicit_model_choice
        section = model_section(self.contract_path) if explicit != set(MODEL_CHOICE_FIELDS) else None
        own = section if section is not None and section.family == family else None
        params = self.model_params if "model_params" in explicit else dict(own.params) if own else {}
        calibration = self.calibration if "calibration" in explicit else \
            (own.calibration if own is not None and own.calibration is not None else "auto")
        chosen = self.model_copy(update={"model_family": family})  # named now: a setting
        chosen.__dict__.update(model_params=params, calibration=calibration)  # set or not, as they were
        return chosen

    @property
    def resolved_checkpoint_dir(self) -> str:
        return self.checkpoint_dir or str(self.resolved_home / "checkpoints")
