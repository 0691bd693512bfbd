"""The monitoring jobs' settings: the platform's base plus the drift job's levels and actions and the
estimated quality's margins and calibration guard."""

from __future__ import annotations

from pydantic import Field

from mlops.settings import Settings


class MonitoringSettings(Settings):
    """The base settings, the drift job's (PSI levels, the fewest rows, the cool-down, retraining) and the
    estimated quality's (drop margins, the calibration guard)."""

    drift_psi_warning: float = Field(default=0.1, gt=0, description="PSI at which a feature's drift is WARNING.")
    drift_psi_critical: float = Field(default=0.2, gt=0, description="PSI at which a feature's drift is CRITICAL.")
    drift_min_rows: int = Field(default=30, ge=1, description="Fewest predictions a drift verdict needs.")
    drift_cooldown_s: float = Field(
        default=3600.0, ge=0, description="After a CRITICAL action, later CRITICAL verdicts act again only after this.")
    drift_retrain: bool = Field(default=True, description="Start a retraining run on a CRITICAL verdict.")
    estimate_drop_warning: float = Field(
        default=0.05, gt=0, description="Drop of the estimated F1 or PR-AUC below the reference's that is WARNING.")
    estimate_drop_critical: float = Field(
        default=0.10, gt=0, description="Drop of the estimated F1 or PR-AUC below the reference's that is CRITICAL.")
    calibration_ece_limit: float = Field(
        default=0.05, gt=0, description="ECE on late labels above which a version's estimated quality is distrusted.")
    calibration_min_labelled: int = Field(
        default=1000, ge=1, description="Fewest labelled predictions of a version that judge its calibration.")
