"""Alert rules have one source (monitoring/prometheus/alerts.yml); the PrometheusRule in the
overlays is generated from it and must agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import rules
from infra.manifests import find_object

pytestmark = pytest.mark.integration

REQUIRED_METRICS = ("mlops_request_latency_seconds_bucket", "mlops_requests_total", "mlops_drift_level",
                    "mlops_training_run_failed_total", "DCGM_FI_DEV_GPU_UTIL", "kueue_pending_workloads")


def test_the_deployed_rules_are_the_alerts_file(built: dict[str, list[dict[str, Any]]]) -> None:
    alerts = yaml.safe_load(rules.ALERTS_FILE.read_text())
    for objects in built.values():
        deployed = find_object(objects, "PrometheusRule", "mlops-alerts")
        assert deployed["spec"]["groups"] == alerts["groups"]
    assert rules.main(["--check"]) == 0


def test_an_edited_alerts_file_makes_the_manifest_stale_until_regenerated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    edited = tmp_path / "alerts.yml"
    edited.write_text(rules.ALERTS_FILE.read_text().replace("> 0.01", "> 0.05"))
    assert rules.main(["--check"], alerts_file=edited) == 1
    assert "is stale: run `make infra-rules`" in capsys.readouterr().err
    regenerated = tmp_path / "prometheus-rules.yaml"
    assert rules.main([], alerts_file=edited, manifest=regenerated) == 0
    assert rules.main(["--check"], alerts_file=edited, manifest=regenerated) == 0
    assert "> 0.05" in regenerated.read_text()


def test_the_alerts_cover_serving_drift_training_and_gpus() -> None:
    alerts = [rule for group in yaml.safe_load(rules.ALERTS_FILE.read_text())["groups"] for rule in group["rules"]]
    expressions = " ".join(rule["expr"] for rule in alerts)
    for metric in REQUIRED_METRICS:
        assert metric in expressions, metric
    for rule in alerts:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
    names = {rule["alert"] for rule in alerts}
    assert {"FeatureDriftWarning", "FeatureDriftCritical", "ServingErrorRateHigh", "GPUIdleWhileJobsQueue"} <= names
