"""Prometheus metrics of the monitoring jobs: per-feature drift scores and levels, the estimated
quality with its interval and level, job duration and last success, labelled model quality with the
gap to the estimate and the calibration error, the canary analysis' checks per arm and its verdict.
Each job fills a fresh registry and pushes it to the Pushgateway (MLOPS_PUSHGATEWAY_URL) that
Prometheus scrapes; it is also written as a text file (``<home>/monitoring/<job>.prom``) for a node
exporter's textfile collector."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile

from monitoring.drift import LEVELS, DriftReport
from monitoring.estimated_quality import METRICS, EstimatedQuality
from monitoring.labels import QualityRow

if TYPE_CHECKING:  # the canary module publishes through this one
    from monitoring.canary import CanaryVerdict

DRIFT_JOB = "mlops_drift"
QUALITY_JOB = "mlops_quality"
CANARY_JOB = "mlops_canary"
# Numbers a panel can plot and an alert can compare; "skipped" checks are not exported.
CHECK_CODES = {"pass": 0, "not judged": 1, "fail": 2}
VERDICT_CODES = {"wait": 0, "promote": 1, "roll back": 2}


def drift_registry(reports: list[DriftReport], estimated: list[EstimatedQuality],
                   duration_s: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    labels = ["model_name", "model_version", "feature"]
    score = Gauge("mlops_drift_score", "Drift score: PSI, or the change of the confident share.", labels,
                  registry=registry)
    p_value = Gauge("mlops_drift_p_value", "p-value of the feature's KS or chi-squared test.", [*labels, "test"],
                    registry=registry)
    level = Gauge("mlops_drift_level", "Drift level: 0 INFO, 1 WARNING, 2 CRITICAL.", labels, registry=registry)
    rows = Gauge("mlops_drift_window_rows", "Predictions in the judged window.", labels[:2], registry=registry)
    for report in reports:
        rows.labels(report.model_name, report.model_version).set(report.rows)
        for feature in report.features:
            key = (report.model_name, report.model_version, feature.feature)
            level.labels(*key).set(LEVELS.index(feature.level))
            if feature.score is not None:
                score.labels(*key).set(feature.score)
            if feature.p_value is not None:
                p_value.labels(*key, feature.test).set(feature.p_value)
    _estimate_gauges(registry, estimated)
    _job_gauges(registry, "drift", duration_s)
    return registry


def _estimate_gauges(registry: CollectorRegistry, estimated: list[EstimatedQuality]) -> None:
    labels = ["model_name", "model_version", "role"]
    value = Gauge("mlops_estimated_quality", "Quality expected from the calibrated probabilities, without labels: "
                  "the estimate, its 95 % interval (low, high) and the reference's estimate.",
                  [*labels, "metric", "bound"], registry=registry)
    level = Gauge("mlops_estimated_quality_level", "Estimated quality level: 0 INFO, 1 WARNING, 2 CRITICAL.", labels,
                  registry=registry)
    reliable = Gauge("mlops_estimated_quality_reliable", "1 when the version's calibration passed its last check.",
                     labels, registry=registry)
    for estimate in estimated:
        key = (estimate.model_name, estimate.model_version, estimate.role)
        level.labels(*key).set(LEVELS.index(estimate.level))
        reliable.labels(*key).set(int(estimate.reliable))
        for metric in METRICS:
            interval = estimate.estimate.metric(metric)
            for bound, figure in (("estimate", interval.estimate), ("low", interval.low), ("high", interval.high)):
                value.labels(*key, metric, bound).set(figure)
            if estimate.reference is not None:
                value.labels(*key, metric, "reference").set(estimate.reference.metric(metric).estimate)


def quality_registry(rows: list[QualityRow], duration_s: float) -> CollectorRegistry:
    """The latest window's quality per model version and role, its gap to the estimate and the ECE."""
    registry = CollectorRegistry()
    quality = Gauge("mlops_model_quality", "Model quality on late labels in the latest window.",
                    ["model_version", "role", "metric"], registry=registry)
    labelled = Gauge("mlops_model_labelled_predictions", "Labelled predictions in the latest window.",
                     ["model_version", "role"], registry=registry)
    gap = Gauge("mlops_estimated_quality_gap", "Realized minus estimated quality on the latest window's labels.",
                ["model_version", "role", "metric"], registry=registry)
    ece = Gauge("mlops_calibration_ece", "Expected calibration error on the latest window's labels.",
                ["model_version", "role"], registry=registry)
    latest = max((r.window_start for r in rows), default=None)
    for row in rows:
        if row.window_start != latest:
            continue
        for metric in METRICS:
            quality.labels(row.model_version, row.role, metric).set(getattr(row, metric))
            difference = row.gap(metric)
            if difference is not None:
                gap.labels(row.model_version, row.role, metric).set(difference)
        labelled.labels(row.model_version, row.role).set(row.labelled)
        if row.ece is not None:
            ece.labels(row.model_version, row.role).set(row.ece)
    _job_gauges(registry, "quality", duration_s)
    return registry


def canary_registry(verdict: CanaryVerdict, duration_s: float) -> CollectorRegistry:
    """Each judged check's figure per arm (with its version), each check's status, the rows per arm and the verdict."""
    registry = CollectorRegistry()
    value = Gauge("mlops_canary_check_value", "The canary analysis' figure of a check per arm.",
                  ["check", "arm", "model_version"], registry=registry)
    status = Gauge("mlops_canary_check_status", "A canary check: 0 pass, 1 not judged yet, 2 fail.", ["check"],
                   registry=registry)
    rows = Gauge("mlops_canary_window_rows", "Predictions per arm in the canary's window.", ["arm", "model_version"],
                 registry=registry)
    Gauge("mlops_canary_verdict", "The canary verdict: 0 wait, 1 promote, 2 roll back.", ["model_version"],
          registry=registry).labels(verdict.canary_version or "").set(VERDICT_CODES[verdict.verdict])
    arms = (("canary", verdict.canary_version, verdict.canary_rows),
            ("champion", verdict.champion_version, verdict.champion_rows))
    for arm, version, count in arms:
        rows.labels(arm, version or "").set(count)
    for check in verdict.checks:
        if check.status in CHECK_CODES:
            status.labels(check.name).set(CHECK_CODES[check.status])
        for arm, version, figure in ((a, v, getattr(check, a)) for a, v, _ in arms):
            if figure is not None:
                value.labels(check.name, arm, version or "").set(figure)
    _job_gauges(registry, "canary", duration_s)
    return registry


def _job_gauges(registry: CollectorRegistry, job: str, duration_s: float) -> None:
    # Labelled "monitor", not "job": the Pushgateway's grouping key owns the job label.
    Gauge("mlops_monitoring_job_duration_seconds", "Wall time of the monitoring job's last run.", ["monitor"],
          registry=registry).labels(job).set(duration_s)
    Gauge("mlops_monitoring_job_last_success_timestamp_seconds", "When the monitoring job last succeeded.",
          ["monitor"], registry=registry).labels(job).set(time.time())


def publish(registry: CollectorRegistry, job: str, monitoring_dir: Path, pushgateway_url: str | None) -> None:
    monitoring_dir.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(monitoring_dir / f"{job}.prom"), registry)
    if pushgateway_url:
        push_to_gateway(pushgateway_url, job=job, registry=registry)
