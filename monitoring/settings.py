"""The monitoring jobs' settings: the platform's base plus the drift job's levels and actions and the
estimated quality's margins and calibration guard."""

from __future__ import annotations

from typing import Literal

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
    retrain_runner: Literal["kfp", "inline"] = Field(
        default="kfp", description="How a local retraining run runs its steps: kfp.local, a process per step as on "
                                   "Kubeflow, or inline, the same steps in one process (faster on a small machine).")
    estimate_drop_warning: float = Field(
        default=0.05, gt=0, description="Drop of the estimated F1 or PR-AUC below the reference's that is WARNING.")
    estimate_drop_critical: float = Field(
        default=0.10, gt=0, description="Drop of the estimated F1 or PR-AUC below the reference's that is CRITICAL.")
    calibration_ece_limit: float = Field(
        default=0.05, gt=0, description="ECE on late labels above which a version's estimated quality is distrusted.")
    calibration_min_labelled: int = Field(
        default=1000, ge=1, description="Fewest labelled predictions of a version that judge its calibration.")
    canary_min_rows: int = Field(
        default=500, ge=2, description="Fewest predictions per arm that judge the canary's scores and decisions.")
    canary_min_latency_rows: int = Field(
        default=200, ge=2, description="Fewest timed predictions per arm that judge the canary's latency p99.")
    canary_min_labelled: int = Field(
        default=300, ge=2, description="Fewest labelled predictions per arm that judge the canary's PR-AUC.")
    canary_min_positives: int = Field(
        default=10, ge=1, description="Fewest positive labels per arm that judge the canary's PR-AUC.")
    canary_error_rate_margin: float = Field(
        default=0.01, ge=0, description="Error rate of the canary above the champion's that fails it.")
    canary_latency_ratio: float = Field(
        default=1.5, gt=1, description="Canary latency p99 over the champion's that fails it (with the floor).")
    canary_latency_floor_ms: float = Field(
        default=5.0, ge=0, description="Milliseconds the canary's p99 must also exceed the champion's by to fail: "
                                       "below it a slower p99 is a busy node's noise, not a slower model.")
    canary_score_psi: float = Field(
        default=0.1, gt=0, description="How far the canary's PSI against its own reference scores may pass the "
                                       "champion's against its own (the arms' PSI against each other without "
                                       "reference profiles); the arms score the same traffic, so tighter than the "
                                       "drift levels.")
    canary_decision_rate_ratio: float = Field(
        default=1.5, gt=1, description="Ratio (either way) of the arms' positive-decision rates, each over its "
                                       "reference's rate, that fails the canary (relative: positives are often rare).")
    canary_pr_auc_margin: float = Field(
        default=0.02, ge=0, description="PR-AUC loss the canary must surely exceed (interval's top below minus "
                                        "this) to fail.")
    canary_significance: float = Field(
        default=0.01, gt=0, lt=1, description="p-value under which an arms' difference is not chance (KS, "
                                              "two-proportion tests) and 1 - the bootstrap interval's level.")
