"""The Grafana dashboards, defined once here and written as provisioned JSON into
monitoring/grafana/dashboards/ (``python -m monitoring.dashboards``; a test fails when the
committed files are stale). The Prometheus test evaluates every query below against a real
Prometheus, and ``monitoring.render_dashboards`` draws them from its answers.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD_DIR = Path(__file__).parent / "grafana" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
PREDICT = 'route="/predict"'


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"


def _latency(quantile: str) -> tuple[str, str]:
    buckets = f"rate(mlops_request_latency_seconds_bucket{{{PREDICT}}}[5m])"
    return f"histogram_quantile({quantile}, sum by (le) ({buckets}))", f"p{quantile[2:]}"


DASHBOARDS: dict[str, tuple[str, tuple[Panel, ...]]] = {
    "serving": ("Prediction service", (
        Panel("Request rate", (("sum by (route, status) (rate(mlops_requests_total[5m]))", "{{route}} {{status}}"),),
              "reqps"),
        Panel("Latency /predict", (_latency("0.50"), _latency("0.95"), _latency("0.99")), "s"),
        # `or vector(0)`: no 5xx series yet means a share of 0, not an empty panel.
        Panel("Error rate /predict", ((f'(sum(rate(mlops_requests_total{{{PREDICT}, status=~"5.."}}[5m])) '
                                       f"or vector(0)) / sum(rate(mlops_requests_total{{{PREDICT}}}[5m]))",
                                       "5xx share"),),
              "percentunit"),
        Panel("Served model version", (("max by (name, version, alias) (mlops_model_info)",
                                        "{{name}} v{{version}} @{{alias}}"),), kind="stat"),
        # Per scored transaction (single and batch routes alike), not per request.
        Panel("Unknown-entity rate", (("sum by (entity) (rate(mlops_unknown_entities_total[5m])) / scalar("
                                       "sum(rate(mlops_predictions_total[5m])))", "{{entity}}"),), "percentunit"),
        Panel("Predicted probability (median)", (
            ("histogram_quantile(0.5, sum by (le) (rate(mlops_predicted_probability_bucket[5m])))", "p50"),)),
        Panel("Feature fetch and inference p95", (
            ("histogram_quantile(0.95, sum by (le) (rate(mlops_feature_fetch_seconds_bucket[5m])))", "features"),
            ("histogram_quantile(0.95, sum by (le) (rate(mlops_inference_seconds_bucket[5m])))", "inference")), "s"),
        Panel("Model reloads", (("sum by (result) (increase(mlops_model_reloads_total[1h]))", "{{result}}"),)),
        # Off the response path: the challenger's and the canary rows' champion-paired scores.
        Panel("Shadow scoring: waiting batches and dropped rows", (
            ("max(mlops_shadow_pending)", "batches waiting"),
            ("sum by (role) (rate(mlops_shadow_dropped_rows_total[5m]))", "{{role}} rows dropped /s"))),
    )),
    "drift": ("Drift", (
        Panel("Drift score per feature (PSI)", (
            ('max by (feature) (mlops_drift_score{feature!~"probability|confident_share"})', "{{feature}}"),)),
        Panel("Drift level per feature (0 INFO, 1 WARNING, 2 CRITICAL)", (
            ("max by (feature) (mlops_drift_level)", "{{feature}}"),)),
        Panel("Prediction drift (model drift before labels)", (
            ('max by (feature) (mlops_drift_score{feature=~"probability|confident_share"})', "{{feature}}"),)),
        Panel("Test p-values (KS, chi-squared)", (("min by (feature, test) (mlops_drift_p_value)",
                                                   "{{feature}} {{test}}"),)),
        Panel("Window size", (("sum by (model_version) (mlops_drift_window_rows)", "v{{model_version}}"),)),
        Panel("Monitoring jobs: duration and age of last success", (
            ("max by (monitor) (mlops_monitoring_job_duration_seconds)", "{{monitor}} duration"),
            ("time() - max by (monitor) (mlops_monitoring_job_last_success_timestamp_seconds)",
             "{{monitor}} since success")), "s"),
    )),
    "quality": ("Model quality (late labels, and estimated before them)", (
        Panel("F1 per model version", (('max by (model_version, role) (mlops_model_quality{metric="f1"})',
                                         "v{{model_version}} {{role}}"),), "percentunit"),
        Panel("PR-AUC per model version", (('max by (model_version, role) (mlops_model_quality{metric="pr_auc"})',
                                             "v{{model_version}} {{role}}"),), "percentunit"),
        Panel("Precision and recall", (
            ('max by (model_version, role, metric) (mlops_model_quality{metric=~"precision|recall"})',
             "v{{model_version}} {{role}} {{metric}}"),), "percentunit"),
        Panel("Labelled predictions", (("sum by (model_version, role) (mlops_model_labelled_predictions)",
                                        "v{{model_version}} {{role}}"),)),
        # The estimate exists as soon as predictions are logged; the realized value only once labels arrive.
        Panel("F1: estimated before labels vs realized", (
            ('max by (model_version, role) (mlops_estimated_quality{metric="f1", bound="estimate"})',
             "v{{model_version}} {{role}} estimated"),
            ('max by (model_version, role) (mlops_estimated_quality{metric="f1", bound="low"})',
             "v{{model_version}} {{role}} estimate 95 % low"),
            ('max by (model_version, role) (mlops_estimated_quality{metric="f1", bound="high"})',
             "v{{model_version}} {{role}} estimate 95 % high"),
            ('max by (model_version, role) (mlops_model_quality{metric="f1"})', "v{{model_version}} {{role}} realized"),
        ), "percentunit"),
        Panel("Estimate gap and calibration", (
            ("max by (model_version, role, metric) (mlops_estimated_quality_gap)",
             "v{{model_version}} {{role}} {{metric}} realized - estimated"),
            ("max by (model_version, role) (mlops_calibration_ece)", "v{{model_version}} {{role}} ECE"),
            ("min by (model_version, role) (mlops_estimated_quality_reliable)",
             "v{{model_version}} {{role}} estimate trusted (1)"),
        )),
    )),
    # One series per arm (canary and champion, with their versions) for each check's figure.
    "canary": ("Canary analysis", (
        Panel("Verdict (0 wait, 1 promote, 2 roll back)", (("max by (model_version) (mlops_canary_verdict)",
                                                            "canary v{{model_version}}"),)),
        Panel("Checks (0 pass, 1 not judged yet, 2 fail)", (("max by (check) (mlops_canary_check_status)",
                                                             "{{check}}"),)),
        Panel("Latency p99 per arm", (('max by (arm, model_version) (mlops_canary_check_value{check="latency p99"})',
                                       "{{arm}} v{{model_version}}"),), "s"),
        Panel("Mean probability per arm", (
            ('max by (arm, model_version) (mlops_canary_check_value{check="score distribution"})',
             "{{arm}} v{{model_version}}"),)),
        Panel("Positive-decision rate per arm", (
            ('max by (arm, model_version) (mlops_canary_check_value{check="decision rate"})',
             "{{arm}} v{{model_version}}"),), "percentunit"),
        Panel("PR-AUC per arm (late labels)", (
            ('max by (arm, model_version) (mlops_canary_check_value{check="PR-AUC"})', "{{arm}} v{{model_version}}"),),
              "percentunit"),
        Panel("Predictions per arm in the window", (("max by (arm, model_version) (mlops_canary_window_rows)",
                                                     "{{arm}} v{{model_version}}"),)),
    )),
    "gpu": ("GPUs (DCGM exporter)", (
        Panel("GPU utilisation", (("avg by (Hostname, gpu) (DCGM_FI_DEV_GPU_UTIL)", "{{Hostname}} gpu{{gpu}}"),),
              "percent"),
        Panel("GPU memory used", (("sum by (Hostname, gpu) (DCGM_FI_DEV_FB_USED) * 1024 * 1024",
                                   "{{Hostname}} gpu{{gpu}}"),), "bytes"),
        Panel("GPU temperature", (("max by (Hostname, gpu) (DCGM_FI_DEV_GPU_TEMP)", "{{Hostname}} gpu{{gpu}}"),),
              "celsius"),
        Panel("GPU power", (("sum by (Hostname, gpu) (DCGM_FI_DEV_POWER_USAGE)", "{{Hostname}} gpu{{gpu}}"),),
              "watt"),
        Panel("NVLink traffic", (
            ("sum by (Hostname, gpu) (rate(DCGM_FI_PROF_NVLINK_TX_BYTES[5m]))", "{{Hostname}} gpu{{gpu}} tx"),
            ("sum by (Hostname, gpu) (rate(DCGM_FI_PROF_NVLINK_RX_BYTES[5m]))", "{{Hostname}} gpu{{gpu}} rx")),
              "Bps"),
        Panel("Workloads waiting in Kueue", (('sum by (cluster_queue) (kueue_pending_workloads{status="active"})',
                                              "{{cluster_queue}}"),)),
    )),
}


def _panel_json(panel: Panel, index: int) -> dict[str, Any]:
    return {
        "id": index + 1, "type": panel.kind, "title": panel.title, "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": [{"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": chr(65 + n)}
                    for n, (expr, legend) in enumerate(panel.queries)],
    }


def dashboard_json(key: str) -> dict[str, Any]:
    title, panels = DASHBOARDS[key]
    return {"uid": f"mlops-{key}", "title": f"MLOps: {title}", "tags": ["mlops"], "schemaVersion": 39,
            "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
            "panels": [_panel_json(p, n) for n, p in enumerate(panels)]}


def render_all() -> dict[Path, str]:
    return {DASHBOARD_DIR / f"{key}.json": json.dumps(dashboard_json(key), indent=2) + "\n" for key in DASHBOARDS}


def main(argv: list[str]) -> int:
    stale = [path for path, text in render_all().items() if not path.exists() or path.read_text() != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path} is stale: run `python -m monitoring.dashboards`", file=sys.stderr)
        return 1 if stale else 0
    for path, text in render_all().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
