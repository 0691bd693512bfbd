"""A real Prometheus (Debian package) and Pushgateway: the monitoring jobs push, Prometheus scrapes,
and every dashboard panel's query and every alert rule evaluates; promtool accepts the committed
configuration and rules. The drift and quality panels must return data; the service's panels
must evaluate here and return data in tests/e2e/test_closed_loop.py, which scrapes the running service."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import pytest
import yaml
from prometheus_stack import BINARIES, MISSING_REASON, PROMETHEUS_DIR, PrometheusStack, prometheus_stack, until

from mlops import registry
from mlops.prediction_log import PredictionLog, log_dir
from mlops.reference_profile import ReferenceProfile
from monitoring.canary import run_canary
from monitoring.dashboards import DASHBOARD_DIR
from monitoring.dashboards import main as dashboards_main
from monitoring.job import run_drift
from monitoring.labels import ingest_labels
from monitoring.quality_job import run_quality
from monitoring.render_dashboards import render
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec

if TYPE_CHECKING:
    from served_traffic import LogWriter, Registrar, Traffic

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not all(BINARIES.values()), reason=MISSING_REASON)]
# Panels whose metrics come from a service these tests do not start (the prediction service is
# scraped in tests/e2e/test_closed_loop.py; GPU nodes and Kueue are not here).
NO_DATA_EXPECTED = ("serving", "gpu")


def _assert_rendered(png: Path, dashboard: Path, *, drawn: bool) -> None:
    """A decodable PNG of the figure's size (two panels a row, 13 x 3 inches each row at 70 dpi);
    a dashboard with data shows at least one line in matplotlib's first colour (tab:blue)."""
    from PIL import Image

    panels = len(json.loads(dashboard.read_text())["panels"])
    with Image.open(png) as image:
        image.load()
        assert (image.format, image.size) == ("PNG", (13 * 70, 3 * 70 * ((panels + 1) // 2)))
        pixels = np.asarray(image.convert("RGB"), dtype=np.int32)
    first_colour = int((np.abs(pixels - (31, 119, 180)).sum(axis=2) < 40).sum())
    if drawn:
        assert first_colour > 0, f"{dashboard.stem}: no plotted line in the PNG"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[PrometheusStack]:
    with prometheus_stack(tmp_path) as started:
        yield started


def test_prometheus_scrapes_the_jobs_and_every_panel_and_rule_evaluates(
        stack: PrometheusStack, tmp_path: Path, tracking_uri: str, reference: ReferenceProfile, live: Traffic,
        write_log: LogWriter, register_profile: Registrar, contract: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gateway, prometheus, config_path = stack.gateway, stack.prometheus, stack.config_path
    for key, value in {"MLOPS_HOME": str(tmp_path / "home"), "MLOPS_TRACKING_URI": tracking_uri,
                       "MLOPS_PUSHGATEWAY_URL": gateway, "MLOPS_DRIFT_RETRAIN": "false"}.items():
        monkeypatch.setenv(key, value)
    settings = MonitoringSettings()
    version = register_profile(settings, reference)
    window = live("online_shift")
    write_log(window, PredictionLog(log_dir(settings)), version=version)
    labels = tmp_path / "labels.parquet"
    window[[contract.id_column, contract.label_column]].to_parquet(labels)
    ingest_labels(labels, contract, settings.monitoring_dir)
    record = run_drift(settings, WindowSpec(start=datetime.now(UTC) - timedelta(days=1)))
    quality = run_quality(settings, WindowSpec(), "1D")
    # Every logged row of the window got its label: the daily buckets (two when the last
    # len(window) seconds span midnight) add up to the window, positives to its frauds.
    assert sum(r.labelled for r in quality) == len(window)
    assert sum(r.positives for r in quality) == int(window[contract.label_column].sum())
    assert {r.model_version for r in quality} == {str(version)}
    # A canary on part of the same labelled traffic, judged (not acted on), then ended: the store is shared.
    candidate = register_profile(settings, reference)
    registry.start_canary(settings, candidate, 10, actor="test", reason="canary panels")
    canary_log, after_start = PredictionLog(log_dir(settings)), datetime.now(UTC) + timedelta(seconds=1)
    timed = window.assign(latency_s=np.linspace(0.005, 0.05, len(window)))
    write_log(timed.iloc[1_500:], canary_log, version=version, logged_at=after_start)
    write_log(timed.iloc[:1_500], canary_log, version=candidate, logged_at=after_start, role="canary")
    canary_log.close()
    judged = run_canary(settings, act=False, actor="test")
    registry.rollback(settings, actor="test", reason="end of the panels' canary")
    assert judged.verdict.canary_rows == 1_500

    until(lambda: all(stack.query(metric) for metric in ("mlops_drift_level", "mlops_model_quality",
                                                         "mlops_canary_verdict")),
           "Prometheus to scrape the pushed metrics")
    levels = {r["metric"]["feature"]: int(float(r["value"][1])) for r in
              stack.query("max by (feature) (mlops_drift_level)")}
    assert levels["channel"] == 2
    assert record.level == "CRITICAL"
    assert levels["amount"] == 0

    for dashboard in sorted(DASHBOARD_DIR.glob("*.json")):
        for panel in json.loads(dashboard.read_text())["panels"]:
            for target in panel["targets"]:
                result = stack.query(target["expr"])
                if dashboard.stem not in NO_DATA_EXPECTED:
                    assert result, f"{dashboard.stem}: {panel['title']}: {target['expr']} returned no data"
        _assert_rendered(render(dashboard, prometheus, tmp_path / "png", time.time() - 60, time.time(), 1.0),
                         dashboard, drawn=dashboard.stem not in NO_DATA_EXPECTED)

    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            stack.query(rule["expr"])

    def evaluated() -> bool:
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        return len(loaded) == sum(len(g["rules"]) for g in rules["groups"]) and all(
            r["health"] == "ok" for r in loaded)

    until(evaluated, "every alert rule to evaluate healthy")
    firing = {a["labels"]["alertname"] for a in httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()[
        "data"]["alerts"]}
    assert "FeatureDriftCritical" in firing  # its `for` is 0m: pending or firing as soon as evaluated

    for command in (["check", "config", str(config_path)], ["check", "config", str(PROMETHEUS_DIR / "prometheus.yml")],
                    ["check", "rules", str(PROMETHEUS_DIR / "alerts.yml")]):
        checked = subprocess.run([str(BINARIES["promtool"]), *command], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_committed_dashboards_are_current() -> None:
    assert dashboards_main(["--check"]) == 0
