"""A real Prometheus (Debian package) and Pushgateway: the monitoring jobs push, Prometheus scrapes,
and every dashboard panel's query and every alert rule evaluates; promtool accepts the committed
configuration and rules. The drift and quality panels must return data. The service's panels must
evaluate; they return data once the service exports /metrics (the prediction-service issue)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml

from mlops.prediction_log import PredictionLog, log_dir
from mlops.reference_profile import ReferenceProfile
from mlops.settings import Settings
from monitoring.dashboards import DASHBOARD_DIR
from monitoring.dashboards import main as dashboards_main
from monitoring.job import run_drift
from monitoring.labels import ingest_labels
from monitoring.quality_job import run_quality
from monitoring.render_dashboards import render
from monitoring.window import WindowSpec

if TYPE_CHECKING:
    from monitoring_fixtures import LogWriter, Registrar, Traffic

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus"
BINARIES = {name: shutil.which(name) for name in ("prometheus", "promtool", "prometheus-pushgateway")}
pytestmark = pytest.mark.skipif(not all(BINARIES.values()), reason=(
    "needs Prometheus from Debian: apt-get install -y prometheus prometheus-pushgateway (.ci/run does)"))
# Panels whose metrics come from a service these tests do not start (GPU nodes, Kueue).
NO_DATA_EXPECTED = ("serving", "gpu")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(url: str, deadline_s: float = 30) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {deadline_s} s")


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """(pushgateway URL, Prometheus URL, the config it runs) with 1 s scrape and rule intervals."""
    gateway_port, prometheus_port = _free_port(), _free_port()
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS_DIR / "alerts.yml")]
    targets = {"pushgateway": f"127.0.0.1:{gateway_port}"}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [targets.get(job["job_name"], f"127.0.0.1:{_free_port()}")]}]
    config_path = tmp_path / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    logs = (tmp_path / "pushgateway.log").open("w"), (tmp_path / "prometheus.log").open("w")
    processes = [
        # Debian's build persists to /var/lib/prometheus/pushgateway.data by default: shared between runs.
        subprocess.Popen([str(BINARIES["prometheus-pushgateway"]), f"--web.listen-address=127.0.0.1:{gateway_port}",
                          f"--persistence.file={tmp_path / 'pushgateway.data'}"],
                         stdout=logs[0], stderr=subprocess.STDOUT),
        subprocess.Popen([str(BINARIES["prometheus"]), f"--config.file={config_path}",
                          f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                         stdout=logs[1], stderr=subprocess.STDOUT),
    ]
    try:
        gateway, prometheus = f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{prometheus_port}"
        _wait_ready(f"{gateway}/-/ready")
        _wait_ready(f"{prometheus}/-/ready")
        yield gateway, prometheus, config_path
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        for log in logs:
            log.close()


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", (expr, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _until(check: Callable[[], bool], what: str, deadline_s: float = 30) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_prometheus_scrapes_the_jobs_and_every_panel_and_rule_evaluates(
        stack: tuple[str, str, Path], tmp_path: Path, tracking_uri: str, reference: ReferenceProfile, live: Traffic,
        write_log: LogWriter, register_profile: Registrar, contract: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    gateway, prometheus, config_path = stack
    for key, value in {"MLOPS_HOME": str(tmp_path / "home"), "MLOPS_TRACKING_URI": tracking_uri,
                       "MLOPS_PUSHGATEWAY_URL": gateway, "MLOPS_DRIFT_RETRAIN": "false"}.items():
        monkeypatch.setenv(key, value)
    settings = Settings()
    version = register_profile(settings, reference)
    window = live("online_shift")
    write_log(window, PredictionLog(log_dir(settings)), version=version)
    labels = tmp_path / "labels.parquet"
    window[[contract.id_column, contract.label_column]].to_parquet(labels)
    ingest_labels(labels, contract, settings.monitoring_dir)
    record = run_drift(settings, WindowSpec(start=datetime.now(UTC) - timedelta(days=1)))
    quality = run_quality(settings, WindowSpec(), "1D")
    assert quality
    assert quality[-1].labelled > 0

    _until(lambda: bool(_query(prometheus, "mlops_drift_level")) and bool(_query(prometheus, "mlops_model_quality")),
           "Prometheus to scrape the pushed metrics")
    levels = {r["metric"]["feature"]: int(float(r["value"][1])) for r in
              _query(prometheus, "max by (feature) (mlops_drift_level)")}
    assert levels["channel"] == 2
    assert record.level == "CRITICAL"
    assert levels["amount"] == 0

    for dashboard in sorted(DASHBOARD_DIR.glob("*.json")):
        for panel in json.loads(dashboard.read_text())["panels"]:
            for target in panel["targets"]:
                result = _query(prometheus, target["expr"])
                if dashboard.stem not in NO_DATA_EXPECTED:
                    assert result, f"{dashboard.stem}: {panel['title']}: {target['expr']} returned no data"
        assert render(dashboard, prometheus, tmp_path / "png", time.time() - 60, time.time(), 1.0).stat().st_size > 0

    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            _query(prometheus, rule["expr"])

    def evaluated() -> bool:
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        return len(loaded) == sum(len(g["rules"]) for g in rules["groups"]) and all(
            r["health"] == "ok" for r in loaded)

    _until(evaluated, "every alert rule to evaluate healthy")
    firing = {a["labels"]["alertname"] for a in httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()[
        "data"]["alerts"]}
    assert "FeatureDriftCritical" in firing  # its `for` is 0m: pending or firing as soon as evaluated

    for command in (["check", "config", str(config_path)], ["check", "config", str(PROMETHEUS_DIR / "prometheus.yml")],
                    ["check", "rules", str(PROMETHEUS_DIR / "alerts.yml")]):
        checked = subprocess.run([str(BINARIES["promtool"]), *command], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_committed_dashboards_are_current() -> None:
    assert dashboards_main(["--check"]) == 0
