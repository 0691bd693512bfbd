"""The quality job (``mlops labels quality``): the window's predictions joined with their late
labels, scored per time bucket and model version next to the estimate, and exported to Prometheus;
each version's calibration on all the joined labels is stored for the drift job's guard."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import pandas as pd

from mlops.contract import load_contract
from mlops.errors import InputError, NotFoundError
from mlops.prediction_log import log_dir
from mlops.score_map import ScoreMap
from monitoring import metrics
from monitoring.calibration_guard import check_versions, read_checks, save_checks, unreliable
from monitoring.labels import QualityRow, join_labels, quality, read_labels
from monitoring.references import fetch_profile
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec, read_window

log = logging.getLogger(__name__)


def run_quality(settings: MonitoringSettings, spec: WindowSpec, bucket: str) -> list[QualityRow]:
    started = time.perf_counter()
    try:
        pd.tseries.frequencies.to_offset(bucket)
    except ValueError as exc:
        raise InputError(f"--window must be a pandas frequency such as 1h or 1D, got {bucket!r}") from exc
    labelled = join_labels(read_window(log_dir(settings), spec), read_labels(settings.monitoring_dir))
    limit, fewest = settings.calibration_ece_limit, settings.calibration_min_labelled
    versions: list[str] = [] if labelled.empty else labelled["model_version"].astype(str).unique().tolist()
    # Estimated as the drift job estimated before these labels: through the latest check's map.
    checks = read_checks(settings.monitoring_dir)
    maps = {version: (checks[version].score_map if version in checks else None) or _score_map(settings, version)
            for version in versions}
    positive = load_contract(settings.contract_path).decisions.positive
    rows = [row.model_copy(update={"unreliable": unreliable(row.ece or 0.0, row.labelled, limit, fewest) or ""})
            for row in quality(labelled, bucket, positive, maps)]
    if not labelled.empty:
        save_checks(settings.monitoring_dir, check_versions(labelled, datetime.now(UTC)))
    metrics.publish(metrics.quality_registry(rows, time.perf_counter() - started), metrics.QUALITY_JOB,
                    settings.monitoring_dir, settings.pushgateway_url)
    return rows


def _score_map(settings: MonitoringSettings, version: str) -> ScoreMap | None:
    """The version's score map, as the drift job reads its estimate through; None for a version this
    registry does not hold or whose profile predates maps (its estimate reads the probabilities as served)."""
    try:
        return fetch_profile(settings, settings.model_name, version).score_map
    except NotFoundError as missing:
        log.warning("estimating version %s without a score map: %s", version, missing.message)
        return None
