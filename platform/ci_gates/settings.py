"""The CI/CD gates' settings: the platform's base plus what a candidate model and the service must reach."""

from __future__ import annotations

from pydantic import Field

from pipelines.settings import PipelineSettings


class GateSettings(PipelineSettings):
    """The base settings and the gates' floors: the candidate's F1, the service's p99 against its baseline."""

    gate_min_f1: float = Field(
        default=0.5, ge=0.0, le=1.0, description="The performance gate's floor for the candidate's test F1.")
    gate_max_p99_ratio: float = Field(
        default=1.2, gt=1.0, description="The latency gate fails when /predict's p99 exceeds baseline x this.")
