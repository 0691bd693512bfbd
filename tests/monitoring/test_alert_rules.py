"""Alert rules evaluated by promtool's rule tests (a real Prometheus rule engine) on series named as the
service really exports them: the rule fires on what the service counts, and stays quiet on normal traffic."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from monitoring.dashboards import DASHBOARD_DIR
from serving.metrics import ServiceMetrics

pytestmark = pytest.mark.integration

ALERTS = DASHBOARD_DIR.parents[1] / "prometheus" / "alerts.yml"
PROMTOOL = shutil.which("promtool")


def _exported_series(metrics: ServiceMetrics, name: str) -> list[str]:
    """The series of ``name`` in the service's own exposition, as PromQL selectors."""
    return [sample.name + "{" + ", ".join(f'{k}="{v}"' for k, v in sample.labels.items()) + "}"
            for family in text_string_to_metric_families(metrics.exposition().decode())
            for sample in family.samples if sample.name == name]


def _promtool_test(tmp_path: Path, series: list[dict[str, str]], checks: list[dict[str, Any]]) -> str:
    """Run promtool's rule test; returns its output (the test fails when promtool does)."""
    spec = {"rule_files": [str(ALERTS)], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}]}
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([str(PROMTOOL), "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")
def test_dropped_shadow_scores_alert_on_the_role_the_service_counts_and_not_on_normal_traffic(
        tmp_path: Path) -> None:
    # A service that dropped nothing exports each role's series at 0, so rate() and the panel read 0, not no data.
    exported = sorted(_exported_series(ServiceMetrics(), "mlops_shadow_dropped_rows_total"))
    assert exported == ['mlops_shadow_dropped_rows_total{role="challenger"}',
                        'mlops_shadow_dropped_rows_total{role="champion-paired"}']
    challenger, paired = exported
    rule = next(r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]
                if r.get("alert") == "ShadowScoresDropped")

    # 20 quiet minutes on both roles, then the paired role drops 3 rows a minute for 10 minutes.
    _promtool_test(tmp_path, [{"series": challenger, "values": "0x40"},
                              {"series": paired, "values": "0x20 3+3x10 33x10"}], [
        {"eval_time": "15m", "alertname": "ShadowScoresDropped", "exp_alerts": []},
        {"eval_time": "25m", "alertname": "ShadowScoresDropped", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "role": "champion-paired"},
            "exp_annotations": {
                "summary": "The service dropped champion-paired scores: its shadow thread fell behind",
                "description": rule["annotations"]["description"].replace("{{ $labels.role }}", "champion-paired")
                .replace("{{ $value | humanize }}", "15")}}]},
        # 15 minutes after the last drop the window holds none: resolved.
        {"eval_time": "47m", "alertname": "ShadowScoresDropped", "exp_alerts": []},
    ])
