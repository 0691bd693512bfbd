"""The service as production runs it: its own process, following the registry alias.

The module's own copy of the served platform and one service process on it. The
registry is the real SQLite store, reached by the service through a symbolic link, so a test can
cut it off (the link points nowhere) and restore it. Tests run in file order and leave the
alias where they found it: production on version 2 once the promotion test has run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
import tritonclient.http as oip
from prometheus_client.parser import text_string_to_metric_families
from served_platform import ServedPlatform, cache_for_dead_registry, log_handed_to
from service_process import ServiceProcess, free_port, predict_load, start_service

from mlops import registry
from mlops.errors import PromotionConflictError, RegistryError
from mlops.features import compute_features
from mlops.histories import empty_history
from mlops.inference import OnnxModel
from mlops.prediction_frame import read_prediction_frame
from mlops.prediction_log import log_dir, read_predictions
from mlops.registry_client import activate
from mlops.settings import Settings

pytestmark = pytest.mark.integration

TOKEN = "test-admin-token"
POLL_S = 0.3
MAX_BODY = 65_536


@dataclass
class Served:
    platform: ServedPlatform
    service: ServiceProcess
    link: Path
    good: str  # a second good version (same graph, registered again)
    broken: str  # exported under another contract: must never replace a working model

    def cut_registry(self) -> None:
        self.link.unlink()
        self.link.symlink_to(self.platform.settings.resolved_home / "no-such-registry")

    def restore_registry(self) -> None:
        self.link.unlink()
        self.link.symlink_to(self.platform.settings.resolved_home)

    @property
    def link_settings(self) -> Settings:
        """Settings that reach the registry through the link (cut with it)."""
        return self.platform.settings.model_copy(update={"tracking_uri": f"sqlite:///{self.link}/mlflow.db"})


def _register_broken(platform: ServedPlatform) -> str:
    import mlflow.onnx

    model = onnx.load(str(platform.onnx_path))
    onnx.helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                        "contract_sha256": "0" * 64})
    experiment_id = registry.ensure_experiment(platform.settings)
    activate(platform.settings)  # log_model is fluent
    with mlflow.start_run(experiment_id=experiment_id) as run:
        info = mlflow.onnx.log_model(model, name="model", pip_requirements=["onnxruntime"])
    return registry.register_version(platform.settings, info.model_uri, run.info.run_id, {"test": "broken"})


@pytest.fixture(scope="module")
def served(platform_home: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = platform_home.settings.resolved_home
    link = home / "registry-link"
    link.symlink_to(home)
    good = registry.register_version(platform_home.settings, platform_home.model_uri, platform_home.run_id,
                                     {"test": "second good version"})
    broken = _register_broken(platform_home)
    env = {"MLOPS_HOME": str(home), "MLOPS_TRACKING_URI": f"sqlite:///{link}/mlflow.db",
           "MLOPS_MODEL_POLL_INTERVAL_S": str(POLL_S), "MLOPS_ADMIN_TOKEN": TOKEN, "MLOPS_DEV_MODE": "false",
           "MLOPS_MAX_BODY_BYTES": str(MAX_BODY),
           # A fresh connection per registry call: a cut link is an outage, not a pooled open file.
           "MLFLOW_SQLALCHEMYSTORE_POOLCLASS": "NullPool"}
    service = start_service(env, tmp_path_factory.mktemp("logs") / "service.log")
    try:
        yield Served(platform_home, service, link, good, broken)
    finally:
        service.stop()


@pytest.fixture
def on_first_version(served: Served) -> Served:
    """The service on production = the first version, whatever an earlier test (in any order) moved."""
    settings = served.platform.settings
    httpx.post(served.service.url + "/admin/production", headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)
    if registry.alias_version(settings) != served.platform.version:
        registry.promote(settings, served.platform.version, actor="test", reason="reset between tests")
    _wait_for(lambda: _health(served)["model_version"] == served.platform.version and not _health(served)["warning"])
    return served


def _health(served: Served) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(served.service.url + "/healthz", timeout=5).json()
    return answer


def _wait_for(condition: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _metric(served: Served, name: str, labels: dict[str, str]) -> float:
    text = httpx.get(served.service.url + "/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return 0.0


def _graph_rows(platform: ServedPlatform, n: int) -> list[dict[str, Any]]:
    contract = platform.contract
    moment = platform.transactions[contract.timestamp_column].max()
    raw = platform.transactions.head(n)[contract.raw_inputs].to_dict(orient="records")
    empty = {v.view_name: empty_history(v) for v in contract.feature_views}
    return [{**{str(k): v for k, v in r.items()}, **compute_features(contract, empty, moment, {"amount": r["amount"]})}
            for r in raw]


def test_a_standard_oip_client_reads_health_metadata_and_infers(served: Served) -> None:
    platform = served.platform
    name = platform.settings.model_name
    client = oip.InferenceServerClient(url=served.service.url.removeprefix("http://"))
    model = OnnxModel(platform.onnx_path)
    rows = _graph_rows(platform, 5)
    inputs = []
    for graph_input in model.session.get_inputs():
        text = graph_input.type == "tensor(string)"
        values = np.array([[str(r[graph_input.name]).encode() if text else r[graph_input.name]] for r in rows],
                          dtype=np.object_ if text else np.float32)
        tensor = oip.InferInput(graph_input.name, list(values.shape), "BYTES" if text else "FP32")
        tensor.set_data_from_numpy(values, binary_data=False)
        inputs.append(tensor)

    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(name)
    metadata = client.get_model_metadata(name)
    result = client.infer(name, inputs, outputs=[oip.InferRequestedOutput(model.output_name, binary_data=False)])

    assert [i["name"] for i in metadata["inputs"]] == model.input_names
    assert metadata["versions"] == [platform.version]
    np.testing.assert_allclose(result.as_numpy(model.output_name).reshape(-1), model.predict_proba(rows), atol=1e-6)
    assert not client.is_model_ready("another-model")


def test_mlflow_models_serve_scores_the_registered_model(served: Served, tmp_path: Path) -> None:
    platform = served.platform
    model = OnnxModel(platform.onnx_path)
    rows = _graph_rows(platform, 5)
    port = free_port()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "MLFLOW_TRACKING_URI": platform.settings.resolved_tracking_uri,
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(bin_dir / "mlflow"), "models", "serve", "-m", f"models:/{platform.settings.model_name}/"
               f"{platform.version}", "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)]
    with (tmp_path / "mlflow-serve.log").open("wb") as log:
        server = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300  # a loaded CI host needs minutes for mlflow's cold imports
        while not _answers(f"http://127.0.0.1:{port}/ping"):
            log_tail = (tmp_path / "mlflow-serve.log").read_text(errors="replace")[-3000:]
            assert server.poll() is None, f"mlflow models serve exited:\n{log_tail}"
            assert time.monotonic() < deadline, f"mlflow models serve never answered /ping:\n{log_tail}"
            time.sleep(0.5)
        split = {"columns": model.input_names, "data": [[r[c] for c in model.input_names] for r in rows]}
        response = httpx.post(f"http://127.0.0.1:{port}/invocations", json={"dataframe_split": split}, timeout=30)
    finally:
        server.terminate()
        server.wait(timeout=30)

    assert response.status_code == 200, response.text
    scored = np.asarray(response.json()["predictions"][model.output_name], dtype=np.float32).reshape(-1)
    np.testing.assert_allclose(scored, model.predict_proba(rows), atol=1e-6)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_answers_carry_and_log_the_request_id(served: Served, body: dict[str, Any]) -> None:
    response = httpx.post(served.service.url + "/predict", json={**body, "transaction_id": "T-rid"},
                          headers={"x-request-id": "rid-42"}, timeout=10)

    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "rid-42"
    assert response.json()["request_id"] == "rid-42"
    logged = {r.event_id: r for r in read_predictions(log_dir(served.platform.settings))}
    assert logged["T-rid"].request_id == "rid-42"
    latency = logged["T-rid"].latency_s
    assert latency is not None
    assert 0 < latency < response.elapsed.total_seconds()  # the service's share of the round trip


def test_batch_answers_in_order_and_later_rows_see_earlier_ones(served: Served, body: dict[str, Any]) -> None:
    card = {**body, "customer_id": "C-batch"}
    instances = [{**card, "transaction_id": f"T-batch-{n}", "event_timestamp": f"2026-03-02T12:0{n}:00+00:00"}
                 for n in range(3)]

    response = httpx.post(served.service.url + "/predict/batch", json={"instances": instances}, timeout=10)

    assert response.status_code == 200, response.text
    assert [p["transaction_id"] for p in response.json()["predictions"]] == [f"T-batch-{n}" for n in range(3)]
    frame = read_prediction_frame(log_dir(served.platform.settings))
    counts = frame.set_index("event_id").loc[[f"T-batch-{n}" for n in range(3)], "customer_txn_count_1h"]
    assert counts.tolist() == [0.0, 1.0, 2.0]
    assert _metric(served, "mlops_batch_size_count", {}) >= 1


def test_promotion_under_load_fails_no_request_and_switches_versions(
        on_first_version: Served, body: dict[str, Any]) -> None:
    served = on_first_version
    settings = served.platform.settings
    with predict_load(served.service.url, lambda worker, n: {**body, "transaction_id": f"T-load-{worker}-{n}"},
                      clients=4) as answers:
        _wait_for(lambda: len(answers) > 20)
        registry.promote(settings, served.good, expected=served.platform.version, actor="test", reason="load test")
        _wait_for(lambda: any(v == served.good for _, v in answers[-4:]))
        time.sleep(0.5)

    assert {status for status, _ in answers} == {200}
    assert {v for _, v in answers} == {served.platform.version, served.good}
    assert {v for _, v in answers[-4:]} == {served.good}
    assert _metric(served, "mlops_model_info", {"version": served.good, "alias": "production"}) == 1.0


def test_a_broken_version_never_replaces_the_working_one(on_first_version: Served, body: dict[str, Any]) -> None:
    served = on_first_version
    settings = served.platform.settings
    failed_before = _metric(served, "mlops_model_reloads_total", {"result": "failed"})

    registry.promote(settings, served.broken, expected=served.platform.version, actor="test",
                     reason="broken on purpose")
    _wait_for(lambda: f"version {served.broken}" in _health(served)["warning"])
    answer = httpx.post(served.service.url + "/predict", json={**body, "transaction_id": "T-broken"}, timeout=10)

    assert answer.status_code == 200
    assert answer.json()["model_version"] == served.platform.version
    assert "another data contract" in _health(served)["warning"]
    assert _metric(served, "mlops_model_reloads_total", {"result": "failed"}) > failed_before
    registry.rollback(settings, actor="test", reason="back to the working version")
    _wait_for(lambda: _health(served)["warning"] == "")
    assert registry.alias_version(settings) == served.platform.version


def test_promotion_is_compare_and_set(on_first_version: Served) -> None:
    served = on_first_version
    settings = served.platform.settings

    with pytest.raises(PromotionConflictError, match="moved since it was read"):
        registry.promote(settings, served.good, expected=served.broken, actor="test")

    assert registry.alias_version(settings) == served.platform.version


def test_registry_outage_keeps_serving_and_refuses_promotion(
    on_first_version: Served, body: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    served = on_first_version
    monkeypatch.setenv("MLFLOW_SQLALCHEMYSTORE_POOLCLASS", "NullPool")
    served.cut_registry()
    try:
        _wait_for(lambda: "registry unreachable" in _health(served)["warning"])
        ready = httpx.get(served.service.url + "/v2/health/ready", timeout=5)
        answer = httpx.post(served.service.url + "/predict", json={**body, "transaction_id": "T-outage"}, timeout=10)
        with pytest.raises(RegistryError):
            registry.alias_version(served.link_settings)
        with pytest.raises(RegistryError):
            registry.promote(served.link_settings, served.good, expected=served.platform.version, actor="test")
    finally:
        served.restore_registry()

    assert ready.status_code == 200
    assert answer.status_code == 200
    assert answer.json()["model_version"] == served.platform.version
    assert registry.alias_version(served.platform.settings) == served.platform.version
    _wait_for(lambda: _health(served)["warning"] == "")


def test_admin_switches_to_fallback_and_back_with_the_token_only(
        on_first_version: Served, body: dict[str, Any]) -> None:
    served = on_first_version
    settings = served.platform.settings
    registry.promote(settings, served.good, alias="fallback", actor="test", reason="known good")
    url = served.service.url
    auth = {"authorization": f"Bearer {TOKEN}"}

    refused = httpx.post(url + "/admin/fallback", timeout=10)
    wrong = httpx.post(url + "/admin/fallback", headers={"authorization": "Bearer nope"}, timeout=10)
    fallback = httpx.post(url + "/admin/fallback", json={"reason": "drift alert"}, headers=auth, timeout=30)
    on_fallback = httpx.post(url + "/predict", json={**body, "transaction_id": "T-fallback"}, timeout=10)
    back = httpx.post(url + "/admin/production", headers=auth, timeout=30)

    assert (refused.status_code, wrong.status_code) == (401, 401)
    assert refused.json()["error"] == "AuthError"
    assert fallback.json() == {"serving_alias": "fallback", "model_version": served.good}
    assert on_fallback.json()["model_version"] == served.good
    assert back.json() == {"serving_alias": "production", "model_version": served.platform.version}


HAND_CASES: dict[str, tuple[Callable[[dict[str, Any]], dict[str, Any]], int, str | None]] = {
    # case: (body -> httpx.post keyword arguments, status, field the error names)
    "text/plain body": (lambda b: {"content": b"{}", "headers": {"content-type": "text/plain"}}, 415, "content-type"),
    "no content type": (lambda b: {"content": b"{}"}, 415, "content-type"),
    "body over the limit": (lambda b: {"json": {**b, "pad": "x" * MAX_BODY}}, 413, "body"),
    "deeply nested": (lambda b: {"content": b"[" * 30_000 + b"]" * 30_000,
                                 "headers": {"content-type": "application/json"}}, 422, "body"),
    "numeric event_timestamp": (lambda b: {"json": {**b, "event_timestamp": 1_772_000_000}}, 422, "event_timestamp"),
}


@pytest.mark.parametrize("case", list(HAND_CASES))
def test_malformed_bodies_are_4xx_in_the_error_shape(served: Served, body: dict[str, Any], case: str) -> None:
    make_request, status, field = HAND_CASES[case]

    response = httpx.post(served.service.url + "/predict", timeout=10, **make_request(body))

    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["field"] == field


def test_unknown_routes_and_methods_use_the_error_shapes(served: Served) -> None:
    url = served.service.url
    missing = httpx.get(url + "/nowhere", timeout=5)
    method = httpx.get(url + "/predict", timeout=5)
    oip_missing = httpx.get(url + "/v2/models/another-model", timeout=5)
    oip_bad = httpx.post(url + f"/v2/models/{served.platform.settings.model_name}/infer",
                         json={"inputs": [{"name": "amount", "shape": [1], "datatype": "FP32", "data": [1.0]}]},
                         timeout=5)

    assert (missing.status_code, missing.json()["error"]) == (404, "NotFound")
    assert (method.status_code, method.json()["error"]) == (405, "MethodNotAllowed")
    assert oip_missing.status_code == 404
    assert list(oip_missing.json()) == ["error"]
    assert oip_bad.status_code == 422
    assert "missing" in oip_bad.json()["error"]


def test_metrics_count_requests_by_route_and_status(served: Served, body: dict[str, Any]) -> None:
    url = served.service.url
    counted = [("mlops_requests_total", {"route": "/predict", "status": "200"}),
               ("mlops_requests_total", {"route": "/predict", "status": "415"}),
               ("mlops_request_latency_seconds_count", {"route": "/predict"}),
               ("mlops_inference_seconds_count", {}), ("mlops_feature_fetch_seconds_count", {}),
               ("mlops_predicted_probability_count", {})]
    before = [_metric(served, name, labels) for name, labels in counted]
    scored = httpx.post(url + "/predict", json={**body, "transaction_id": "T-metrics"}, timeout=10)
    refused = httpx.post(url + "/predict", content=b"{}", headers={"content-type": "text/plain"}, timeout=10)
    assert (scored.status_code, refused.status_code) == (200, 415)
    after = [_metric(served, name, labels) for name, labels in counted]
    # One answered and one refused request; only the answered one was scored.
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 2, 1, 1, 1]


def test_schemathesis_finds_no_server_error_and_no_schema_violation(served: Served, tmp_path: Path) -> None:
    """Every operation, positive and negative data, every check but one.

    positive_data_acceptance is left out: the schema cannot say that an event time must not lie
    before 1970 or in the future, nor that /infer needs each graph input once, so schema-valid
    data can rightly get a 422.
    """
    command = [str(Path(sys.executable).parent / "schemathesis"), "run", served.service.url + "/openapi.json",
               "--checks", "all", "--exclude-checks", "positive_data_acceptance", "--mode", "all",
               "--max-examples", "25", "--seed", "7", "--request-timeout", "10",
               "--header", f"Authorization: Bearer {TOKEN}"]

    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    httpx.post(served.service.url + "/admin/production", headers={"authorization": f"Bearer {TOKEN}"}, timeout=30)

    assert result.returncode == 0, result.stdout[-4000:]
    assert "Exception in ASGI application" not in served.service.output()


def test_started_without_registry_serves_the_cached_model_and_sigkill_loses_no_answer(
    on_first_version: Served, body: dict[str, Any], tmp_path: Path
) -> None:
    served = on_first_version
    home = served.platform.settings.resolved_home
    dead = tmp_path / "dead-registry-link"
    dead.symlink_to(tmp_path / "no-such-registry")  # MLflow would create a missing folder, not a dead link
    env = {"MLOPS_HOME": str(home), "MLOPS_TRACKING_URI": f"sqlite:///{dead}/mlflow.db",
           "MLOPS_MODEL_POLL_INTERVAL_S": "5", "MLOPS_DEV_MODE": "true"}
    cache_for_dead_registry(served.platform.settings, env["MLOPS_TRACKING_URI"], f"sqlite:///{served.link}/mlflow.db")
    with log_handed_to(served.platform.settings, env["MLOPS_TRACKING_URI"]):
        cached = start_service(env, tmp_path / "cached.log")
    try:
        health = httpx.get(cached.url + "/healthz", timeout=5).json()
        acknowledged: list[str] = []
        stop = threading.Event()

        def load(worker: int) -> None:
            with httpx.Client(base_url=cached.url, timeout=10) as client:
                n = 0
                while not stop.is_set():
                    event_id = f"T-kill-{worker}-{n}"
                    n += 1
                    try:
                        r = client.post("/predict", json={**body, "transaction_id": event_id})
                    except httpx.TransportError:
                        return
                    if r.status_code == 200:
                        acknowledged.append(event_id)

        threads = [threading.Thread(target=load, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        _wait_for(lambda: len(acknowledged) > 50)
        os.kill(cached.process.pid, signal.SIGKILL)
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        cached.stop()

    assert (health["source"], health["model_version"]) == ("cache", served.platform.version)
    assert "registry unreachable" in health["warning"]
    print(f"cached start: ready after {cached.ready_after_s:.1f} s")
    logged = {r.event_id for r in read_predictions(log_dir(served.platform.settings))}
    assert len(acknowledged) > 50
    assert set(acknowledged) <= logged
