"""Embedded mode without a Pushgateway: the drift job's text file, read by node_exporter's textfile
collector and scraped by a real Prometheus with the platform's configuration, fires
FeatureDriftCritical for a CRITICAL run."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from prometheus_stack import BINARIES, free_port, prometheus_stack, until, wait_ready

from mlops.prediction_log import PredictionLog, log_dir
from mlops.reference_profile import ReferenceProfile
from monitoring.job import run_drift
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec

if TYPE_CHECKING:
    from served_traffic import LogWriter, Registrar, Traffic

NODE_EXPORTER = shutil.which("prometheus-node-exporter")
pytestmark = [pytest.mark.integration, pytest.mark.skipif(not (all(BINARIES.values()) and NODE_EXPORTER),
                                reason="needs Debian's prometheus, prometheus-pushgateway, prometheus-node-exporter "
                                "(.ci/system-packages.sh, run by make test, installs them as root)")]


@pytest.fixture
def textfile_exporter(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    directory = tmp_path / "home" / "monitoring"
    directory.mkdir(parents=True)
    address = f"127.0.0.1:{free_port()}"
    with (tmp_path / "node-exporter.log").open("w") as log:
        process = subprocess.Popen([str(NODE_EXPORTER), "--collector.disable-defaults", "--collector.textfile",
                                    f"--collector.textfile.directory={directory}", f"--web.listen-address={address}"],
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(f"http://{address}/metrics")
            yield address, directory
        finally:
            process.terminate()
            process.wait(timeout=30)


def _firing(prometheus: str) -> set[tuple[str, str]]:
    alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    return {(a["labels"]["alertname"], a["labels"].get("feature", "")) for a in alerts if a["state"] == "firing"}


def test_an_embedded_critical_run_fires_feature_drift_critical(
        tmp_path: Path, textfile_exporter: tuple[str, Path], tracking_uri: str, reference: ReferenceProfile,
        live: Traffic, write_log: LogWriter, register_profile: Registrar, monkeypatch: pytest.MonkeyPatch) -> None:
    address, directory = textfile_exporter
    for key, value in {"MLOPS_HOME": str(tmp_path / "home"), "MLOPS_TRACKING_URI": tracking_uri,
                       "MLOPS_DRIFT_RETRAIN": "false", "MLOPS_SERVICE_URL": f"http://127.0.0.1:{free_port()}"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MLOPS_PUSHGATEWAY_URL", raising=False)
    settings = MonitoringSettings()
    assert settings.monitoring_dir == directory
    assert settings.pushgateway_url is None
    (tmp_path / "prometheus").mkdir()
    with prometheus_stack(tmp_path / "prometheus", {"monitoring-textfile": address}) as stack:
        version = register_profile(settings, reference)
        write_log(live("none"), PredictionLog(log_dir(settings)), version=version)
        calm = run_drift(settings, WindowSpec(start=datetime.now(UTC) - timedelta(days=1)))
        assert calm.level == "INFO"
        until(lambda: bool(stack.query("mlops_drift_level")), "the INFO run scraped")
        assert not {name for name, _ in _firing(stack.prometheus)} & {"FeatureDriftCritical", "FeatureDriftWarning"}

        write_log(live("new_merchant_category"), PredictionLog(log_dir(settings)), version=version)
        record = run_drift(settings, WindowSpec(start=datetime.now(UTC) - timedelta(minutes=70)))
        assert record.level == "CRITICAL"
        until(lambda: ("FeatureDriftCritical", "merchant_category") in _firing(stack.prometheus),
              "FeatureDriftCritical firing on merchant_category", deadline_s=60)
