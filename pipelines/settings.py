"""The training pipeline's settings: the platform's base plus what only the pipeline reads (training,
export, evaluation and promotion, checkpoints, the demo).

The pipeline's processes (the CLI's pipeline, train and step commands, kfp.local and DVC steps,
torchrun's ranks) construct this class; the settings reach the steps' processes as one serialized
settings record (MLOPS_SETTINGS_JSON), MLOPS_* variables or params.yaml, read back here.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mlops.settings import Settings


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
                              "xgboost, sklearn); docs/own-model.md.")
    model_params: dict[str, Any] = Field(default={}, description="The family's own parameters, JSON in "
                                         "MLOPS_MODEL_PARAMS (mlp: its settings above).")
    calibration: Literal["auto", "platt", "isotonic", "none"] = Field(
        default="auto", description="How the score is calibrated on validation: auto = the method of least "
        "out-of-fold log loss (none, Platt or isotonic); or that method, forced.")
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

    @property
    def resolved_checkpoint_dir(self) -> str:
        return self.checkpoint_dir or str(self.resolved_home / "checkpoints")
