"""The service with many processes, during an outage, and against hostile numbers.

Many server processes writing one entity's online state at once lose no event: four runs of 500
concurrent /predict for one customer and one merchant, against `mlops serve --workers 4` on the
embedded SQLite store and against two service processes sharing one Redis. Every acknowledged
event must be in the stored history, and a request after the burst must count all 500 in its
logged window features (what the model was given).

With the MLflow server gone (nothing listens at its address), a new replica serves its cached
model within seconds, admin routes answer 503 within 10 s, and neither answers nor the log carry
the tracking URI's password. /infer answers every number with a finite probability or a 422.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import REDIS_MISSING, REDIS_SERVER, redis_server
from served_platform import ServedPlatform, cache_for_dead_registry, log_handed_to, sample_body
from service_process import ServiceProcess, free_port, start_service

from feature_repo.online import open_online_features
from mlops.features import compute_features
from mlops.histories import empty_history
from mlops.inference import OnnxModel
from mlops.prediction_log import log_dir, read_predictions
from mlops.settings import Settings

# The platform build alone is minutes on two busy cores.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]
RUNS = 4
WORKERS_STARTUP_TIMEOUT_S = 300  # four processes importing ONNX Runtime and MLflow at once on two busy cores
CONCURRENT = 500
REDIS_PASSWORD = "test-redis-password"
TOKEN = "test-admin-token-of-32-characters"
TRACKING_PASSWORD = "tracking-s3cret-value"


@pytest.fixture(scope="module")
def service(platform_home: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One service outside dev mode; loading the promoted version writes the model cache."""
    env = {"MLOPS_HOME": str(platform_home.settings.resolved_home), "MLOPS_DEV_MODE": "false",
           "MLOPS_ADMIN_TOKEN": TOKEN}
    started = start_service(env, tmp_path_factory.mktemp("service") / "service.log")
    yield started
    started.stop()


def _start_workers(env: dict[str, str], workers: int, log_path: Path) -> ServiceProcess:
    """`mlops serve --workers N` (uvicorn's supervisor and N processes on one port), once ready."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "mlops_cli", "serve", "--workers", str(workers)],
                                   env={**os.environ, **env, "MLOPS_PORT": str(port)},
                                   stdout=log, stderr=subprocess.STDOUT)
    service = ServiceProcess(process, f"http://127.0.0.1:{port}", log_path, 0.0)
    deadline = time.monotonic() + WORKERS_STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, service.output()
        try:
            # Ready answers from whichever worker accepts; require a run of them to cover all workers.
            if all(httpx.get(service.url + "/v2/health/ready", timeout=2).status_code == 200 for _ in range(20)):
                return service
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    service.stop()
    raise RuntimeError(f"workers not ready:\n{service.output()}")


async def _burst(urls: list[str], body: dict[str, Any], prefix: str) -> tuple[list[str], list[int]]:
    """CONCURRENT requests at once, spread over ``urls``; the ids answered 200 and the other statuses."""
    limits = httpx.Limits(max_connections=CONCURRENT)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def one(n: int) -> tuple[str, int]:
            event_id = f"{prefix}-{n}"
            answer = await client.post(urls[n % len(urls)] + "/predict", json={**body, "transaction_id": event_id})
            return event_id, answer.status_code

        answered = await asyncio.gather(*(one(n) for n in range(CONCURRENT)))
    return [i for i, status in answered if status == 200], [status for _, status in answered if status != 200]


def _bursts_are_exact(platform: ServedPlatform, settings: Settings, urls: list[str], name: str) -> None:
    body = {k: v for k, v in sample_body(platform).items() if k != "event_timestamp"}  # now: all in the window
    online = open_online_features(settings, platform.contract)
    try:
        for run in range(RUNS):
            keys = {"customer_id": f"C-{name}-{run}", "merchant_id": f"M-{name}-{run}"}
            acknowledged, refused = asyncio.run(_burst(urls, {**body, **keys}, f"T-{name}-{run}"))
            probe = f"T-{name}-{run}-probe"
            before_probe = datetime.now(UTC)
            assert httpx.post(urls[0] + "/predict", json={**body, **keys, "transaction_id": probe},
                              timeout=30).status_code == 200

            stored = online.read(keys)
            # The probe's answer only: the whole log (the platform's traffic, every burst) is read elsewhere.
            logged = {r.event_id: r for r in read_predictions(log_dir(platform.settings), start=before_probe)}
            # A lock wait past its limit is refused with a 503 (fail closed); an answered event is never lost.
            assert set(refused) <= {503}
            assert len(refused) <= CONCURRENT // 100
            histories = [set(history.ids) for history in stored.values()]
            assert all(ids == histories[0] for ids in histories)  # one customer and one merchant: the same events
            assert set(acknowledged) | {probe} <= histories[0]
            counted = len(histories[0]) - 1  # every stored event before the probe's own
            assert logged[probe].features["customer_txn_count_1h"] == counted
            assert logged[probe].features["merchant_txn_count_24h"] == counted
    finally:
        online.close()


def test_four_sqlite_workers_keep_every_event(platform_home: ServedPlatform, tmp_path: Path) -> None:
    env = {"MLOPS_HOME": str(platform_home.settings.resolved_home), "MLOPS_DEV_MODE": "true"}
    service = _start_workers(env, 4, tmp_path / "workers.log")
    try:
        _bursts_are_exact(platform_home, platform_home.settings, [service.url], "sqlite")
    finally:
        service.stop()
    assert "Traceback" not in service.output()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with redis_server(tmp_path, REDIS_PASSWORD) as url:
        yield url


@pytest.mark.skipif(REDIS_SERVER is None, reason=REDIS_MISSING)
def test_two_replicas_on_one_redis_keep_every_event(platform_home: ServedPlatform, redis_url: str,
                                                     tmp_path: Path) -> None:
    env = {"MLOPS_HOME": str(platform_home.settings.resolved_home), "MLOPS_DEV_MODE": "true",
           "MLOPS_ONLINE_STORE": "redis", "MLOPS_REDIS_URL": redis_url}
    replicas = [start_service(env, tmp_path / f"replica-{n}.log") for n in range(2)]
    try:
        settings = Settings(online_store="redis", redis_url=redis_url)
        _bursts_are_exact(platform_home, settings, [r.url for r in replicas], "redis")
    finally:
        for replica in replicas:
            replica.stop()
    assert all("Traceback" not in r.output() for r in replicas)


def test_a_replica_started_while_mlflow_is_down_serves_its_cache_and_masks_credentials(
        service: ServiceProcess, platform_home: ServedPlatform, tmp_path: Path) -> None:
    dead = f"http://mlflow:{TRACKING_PASSWORD}@127.0.0.1:{free_port()}"  # nothing listens: a killed server
    env = {"MLOPS_HOME": str(platform_home.settings.resolved_home), "MLOPS_TRACKING_URI": dead,
           "MLOPS_DEV_MODE": "false", "MLOPS_ADMIN_TOKEN": TOKEN, "MLOPS_MODEL_POLL_INTERVAL_S": "1"}
    cache_for_dead_registry(platform_home.settings, dead)
    with log_handed_to(platform_home.settings, dead):
        replica = start_service(env, tmp_path / "replica.log")
    try:
        health = httpx.get(replica.url + "/healthz", timeout=5).json()
        auth = {"authorization": f"Bearer {TOKEN}"}
        answers = {}
        for route in ("/admin/reload", "/admin/fallback"):
            started = time.monotonic()
            # A deadline for a loaded machine, not a time limit: minutes of retries would still fail here.
            answer = httpx.post(replica.url + route, headers=auth, timeout=120)
            answers[route] = (answer.status_code, answer.json(), time.monotonic() - started)
        time.sleep(2)  # a few polls of the dead server reach the log
    finally:
        replica.stop()

    print(f"replica on its cache: ready after {replica.ready_after_s:.1f} s; "
          + ", ".join(f"{route} {seconds:.1f} s" for route, (_, _, seconds) in answers.items()))
    assert (health["source"], health["model_version"]) == ("cache", platform_home.version)
    assert "registry unreachable" in health["warning"]
    assert TRACKING_PASSWORD not in health["warning"]
    for status, body, _ in answers.values():
        assert (status, body["error"]) == (503, "RegistryError")
        assert "the model registry did not answer" in body["detail"]
        assert body["request_id"] in body["detail"]
    output = replica.output()
    assert "registry unreachable" in output
    assert TRACKING_PASSWORD not in output
    assert TRACKING_PASSWORD not in str(answers) + str(health)


def _infer_body(platform: ServedPlatform, name: str, value: Any) -> dict[str, Any]:
    """One graph row with every input valid but ``name`` set to ``value``."""
    contract = platform.contract
    moment = platform.transactions[contract.timestamp_column].max()
    [raw] = platform.transactions.head(1)[contract.raw_inputs].to_dict(orient="records")
    features = compute_features(contract, {v.view_name: empty_history(v) for v in contract.feature_views}, moment,
                                {"amount": raw["amount"]})
    row = {**{str(k): v for k, v in raw.items()}, **features, name: value}
    model = OnnxModel(platform.onnx_path)
    return {"inputs": [{"name": i.name, "shape": [1, 1],
                        "datatype": "BYTES" if i.type == "tensor(string)" else "FP32",
                        "data": [row[i.name]]}
                       for i in model.session.get_inputs()]}


NUMBERS = st.one_of(st.integers(min_value=-(10 ** 400), max_value=10 ** 400), st.floats(allow_nan=True),
                    st.sampled_from([1e39, -1, -1e-300, 3.4028234663852886e38, 3.5e38, 0, 2 ** 63]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=NUMBERS, name=st.sampled_from(["customer_txn_count_1h", "customer_seconds_since_previous",
                                             "customer_amount_sum_24h", "hour_of_day_sin", "amount"]))
def test_infer_answers_any_number_with_a_probability_or_a_422(
        service: ServiceProcess, platform_home: ServedPlatform, value: float, name: str) -> None:
    low, high = {**{n: (platform_home.contract.column(n).min, platform_home.contract.column(n).max)
                    for n in platform_home.contract.raw_inputs}, **platform_home.contract.feature_bounds}[name]
    url = f"{service.url}/v2/models/{platform_home.settings.model_name}/infer"
    # A body the json module writes with NaN/Infinity literals, as a careless client would.
    answer = httpx.post(url, content=json.dumps(_infer_body(platform_home, name, value)),
                        headers={"content-type": "application/json"}, timeout=30)

    # value == value: False for NaN only (math.isnan cannot take an int of 400 digits).
    in_range = (value == value and (low is None or value >= low) and (high is None or value <= high)
                and abs(value) <= 3.4028234663852886e38)
    if not in_range:
        assert answer.status_code == 422, answer.text
        assert name in answer.json()["error"]
    else:
        assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 200:
        [probability] = answer.json()["outputs"][0]["data"]
        assert probability is not None
        assert 0.0 <= probability <= 1.0
