"""The quality job (``mlops labels quality``): the window's predictions joined with their late
labels, scored per time bucket and model version, and exported to Prometheus."""

from __future__ import annotations

import time

import pandas as pd

from mlops.contract import load_contract
from mlops.errors import InputError
from mlops.prediction_log import log_dir
from mlops.settings import Settings
from monitoring import metrics
from monitoring.labels import QualityRow, join_labels, quality, read_labels
from monitoring.window import WindowSpec, read_window


def run_quality(settings: Settings, spec: WindowSpec, bucket: str) -> list[QualityRow]:
    started = time.perf_counter()
    try:
        pd.tseries.frequencies.to_offset(bucket)
    except ValueError as exc:
        raise InputError(f"--window must be a pandas frequency such as 1h or 1D, got {bucket!r}") from exc
    labelled = join_labels(read_window(log_dir(settings), spec), read_labels(settings.monitoring_dir))
    rows = quality(labelled, bucket, load_contract(settings.contract_path).decisions.positive)
    metrics.publish(metrics.quality_registry(rows, time.perf_counter() - started), metrics.QUALITY_JOB,
                    settings.monitoring_dir, settings.pushgateway_url)
    return rows
