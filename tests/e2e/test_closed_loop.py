"""The closed loop on the embedded stack, each hop asserted and timed: serve the champion, replay
drifted traffic through the service, the drift job says CRITICAL, the service answers from the
fallback version within one poll interval, a retraining run on the drifted window registers a
candidate, it is promoted (MLOPS_ROLLOUT=direct) only if it beats the base rate and production beyond
noise, the service follows; a second CRITICAL inside the cool-down does nothing more. A real
Prometheus scrapes the service and the drift job's Pushgateway throughout, and every serving and drift
dashboard panel returns data.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from prometheus_stack import BINARIES, MISSING_REASON, PrometheusStack, prometheus_stack, until

from feature_repo.store import materialize_online
from mlops import registry
from mlops.contract import load_contract
from mlops.data.generator import generate_transactions
from monitoring.actions import read_history
from monitoring.dashboards import DASHBOARD_DIR
from monitoring.job import run_drift, running_retrainings
from monitoring.labels import ingest_labels
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec
from pipelines.demo import free_port, replay_start, start_service, wait_ready
from pipelines.demo_replay import request_body
from pipelines.orchestration.runner import run_pipeline
from pipelines.settings import PipelineSettings
from pipelines.steps.preprocess import time_split

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200),
              pytest.mark.skipif(not all(BINARIES.values()), reason=MISSING_REASON)]
T = TypeVar("T")
ROWS = 6000
POLL_S = 2.0
TOKEN = "closed-loop-token"


@pytest.fixture
def home(tmp_path: Path) -> Iterator[PipelineSettings]:
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {"MLOPS_HOME": str(tmp_path / "home"), "MLOPS_MAX_EPOCHS": "3",
                           "MLOPS_ADMIN_TOKEN": TOKEN, "MLOPS_MODEL_POLL_INTERVAL_S": str(POLL_S),
                           "MLOPS_DRIFT_COOLDOWN_S": "3600",
                           # The loop under test ends with production moving; a retrained candidate's
                           # canary (the default rollout) is tested in tests/monitoring/test_canary_judge.py.
                           "MLOPS_ROLLOUT": "direct",
                           # The retraining is the `mlops pipeline run` process the drift job starts, its steps
                           # in that process: kfp.local's process per step is the demo's and the e2e first run's
                           # (tests/demo_home.py), the same command; here it cost a minute of two cores.
                           "MLOPS_RETRAIN_RUNNER": "inline"}.items():
            patch.setenv(key, value)
        yield PipelineSettings()


def _timed(timings: dict[str, float], hop: str, action: Callable[[], T]) -> T:
    started = time.perf_counter()
    result = action()
    timings[hop] = time.perf_counter() - started
    return result


def _served_version(base: str) -> str:
    return str(httpx.get(f"{base}/healthz", timeout=5).json()["model_version"])


def _until_served(base: str, version: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while _served_version(base) != version:
        assert time.monotonic() < end, f"the service did not follow to version {version} within {deadline_s} s"
        time.sleep(0.2)


def _panels_have_data(stack: PrometheusStack) -> None:
    for name in ("serving", "drift"):
        for panel in json.loads((DASHBOARD_DIR / f"{name}.json").read_text())["panels"]:
            for target in panel["targets"]:
                expr: str = target["expr"]
                until(partial(_has_data, stack, expr), f"{name}: {panel['title']}: {expr} to return data")


def _has_data(stack: PrometheusStack, expr: str) -> bool:
    return bool(stack.query(expr))


def test_drift_switches_to_fallback_retrains_and_the_service_follows(home: PipelineSettings, tmp_path: Path) -> None:
    settings, contract = home, load_contract(home.contract_path)
    timings: dict[str, float] = {}
    data = generate_transactions(ROWS, seed=21)
    source = tmp_path / "train.parquet"
    data.to_parquet(source, index=False)
    # Its own champion, not a shared home's: the drifted traffic and the retraining window are this data's.
    # The champion's steps run in this process (the inline runner); the retraining below in its own.
    champion = run_pipeline(str(source), settings, run_name="champion", runner="inline")
    assert champion.decision == "promote"
    champion_version = str(champion.version)
    # The fallback: a known-good version under its own alias (here the champion's artifacts again).
    mlflow_client = registry.client(settings)
    original = mlflow_client.get_model_version(settings.model_name, champion_version)
    fallback_version = str(mlflow_client.create_model_version(settings.model_name, source=str(original.source),
                                                              run_id=original.run_id).version)
    mlflow_client.set_registered_model_alias(settings.model_name, "fallback", fallback_version)

    materialize_online(settings, contract, replay_start(data, contract))
    port = free_port(settings.host)
    base = f"http://{settings.host}:{port}"
    process = start_service(settings.model_copy(update={"port": port}), port, tmp_path / "serving.log")
    services = ExitStack()
    try:
        wait_ready(base, process, tmp_path / "serving.log")
        (tmp_path / "prometheus").mkdir()
        stack = services.enter_context(prometheus_stack(tmp_path / "prometheus",
                                                        {"prediction-service": f"{settings.host}:{port}"}))
        assert _served_version(base) == champion_version

        drifted = time_split(generate_transactions(ROWS, seed=21, scenario="amount_inflation"), contract)["test"]

        def replay() -> None:
            with httpx.Client(base_url=base, timeout=10) as http:
                for _, row in drifted.iterrows():
                    assert http.post("/predict", json=request_body(row, contract)).status_code == 200

        _timed(timings, "replay drifted traffic", replay)
        labels = tmp_path / "labels.parquet"
        drifted[[contract.id_column, contract.label_column]].to_parquet(labels)
        ingest_labels(labels, contract, settings.monitoring_dir)

        os.environ["MLOPS_SERVICE_URL"] = base
        os.environ["MLOPS_PUSHGATEWAY_URL"] = stack.gateway
        acting = MonitoringSettings()
        record = _timed(timings, "drift job -> CRITICAL", lambda: run_drift(acting, WindowSpec()))
        assert record.level == "CRITICAL"
        assert record.actions == ["fallback", "retrain"]
        _timed(timings, "service answers from fallback", lambda: _until_served(base, fallback_version, POLL_S + 1))

        (retraining,) = [r for r in running_retrainings() if str(r.data) == record.retraining_data]
        started_before = len(running_retrainings())
        _timed(timings, "retraining run", lambda: retraining.process.wait(timeout=900))
        assert retraining.process.returncode == 0, retraining.log.read_text()[-2000:]
        versions = {row["version"]: row for row in registry.list_versions(settings)}
        candidate = max(versions, key=int)
        assert candidate not in {champion_version, fallback_version}
        tags = versions[candidate]
        # The rule's evidence is in the run's evaluation report (the version's tags are the few a person reads).
        report = json.loads(Path(registry.client(settings).download_artifacts(
            tags["run_id"], "evaluation/report.json", str(tmp_path))).read_text())
        beats = (report["promotion"]["pr_auc_lift"] >= settings.promotion_min_pr_auc_lift
                 and report["promotion"]["f1_gain_low"] >= settings.promotion_margin)
        assert (tags["decision"] == "promote") == beats
        assert registry.alias_version(settings) == (candidate if beats else champion_version)

        answer = httpx.post(f"{base}/admin/production", json={"reason": "retrained after drift"},
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert answer.status_code == 200
        _timed(timings, "service follows production", lambda: _until_served(
            base, candidate if beats else champion_version, POLL_S + 1))

        again = run_drift(acting, WindowSpec())
        assert again.level == "CRITICAL"
        assert again.actions[0].startswith("none: cool-down until")
        assert len(running_retrainings()) == started_before
        assert _served_version(base) == (candidate if beats else champion_version)
        assert [r.actions[0] for r in read_history(settings.monitoring_dir)] == ["fallback", again.actions[0]]

        new_card = {**request_body(drifted.iloc[-1], contract), contract.id_column: "T-new-card",
                    contract.entity("customer").join_key: "C-never-seen"}
        answer = httpx.post(f"{base}/predict", json=new_card, timeout=10)
        assert answer.status_code == 200
        assert answer.json()["unknown_entities"] == ["customer"]
        _timed(timings, "Prometheus: every serving and drift panel has data", lambda: _panels_have_data(stack))
    finally:
        services.close()
        os.environ.pop("MLOPS_SERVICE_URL", None)
        os.environ.pop("MLOPS_PUSHGATEWAY_URL", None)
        process.terminate()
        process.wait(timeout=30)
    for hop, seconds in timings.items():
        print(f"{hop}: {seconds:.1f} s")
