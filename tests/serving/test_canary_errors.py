"""A canary that fails on live traffic: its rows are answered by the champion (no customer sees the
failure), the failures are logged against the canary, and the canary analysis rolls it back on its
error rate while production stays where it was.

The canary is the served model with a few nodes added after its output: a Gather that reads past its
two-element data for every score, so ONNX Runtime raises at run time (the graph loads and passes
every check made at load; only scoring fails, as a graph exported with a wrong shape or op would).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import onnx
import pytest
from onnx import TensorProto, helper
from served_platform import ServedPlatform, sample_body
from service_process import ServiceProcess, mlops, start_service

from mlops import registry
from mlops.failure_log import failure_dir, read_failures
from mlops.prediction_frame import read_prediction_frame
from mlops.prediction_log import log_dir
from mlops.registry_client import activate
from pipelines.training.export import ExportResult, log_model_to_mlflow

pytestmark = pytest.mark.integration

CUSTOMERS = 400
REQUESTS = 2_000
BATCH = 100


def _failing_at_run_time(source: Path, target: Path) -> Path:
    """``source`` with its probability passed through a Gather whose index is out of range."""
    model = onnx.load(str(source))
    output = model.graph.output[0].name
    for node in model.graph.node:
        node.output[:] = ["raw_" + output if name == output else name for name in node.output]
    model.graph.node.extend([
        helper.make_node("Constant", [], ["minus_one"], value=helper.make_tensor("m", TensorProto.FLOAT, [], [-1.0])),
        helper.make_node("Greater", ["raw_" + output, "minus_one"], ["always"]),
        helper.make_node("Cast", ["always"], ["one"], to=TensorProto.INT64),
        helper.make_node("Constant", [], ["five"], value=helper.make_tensor("f", TensorProto.INT64, [], [5])),
        helper.make_node("Mul", ["one", "five"], ["past_the_end"]),
        helper.make_node("Constant", [], ["two_zeros"], value=helper.make_tensor("z", TensorProto.FLOAT, [2], [0, 0])),
        helper.make_node("Gather", ["two_zeros", "past_the_end"], ["nothing"]),
        helper.make_node("Add", ["raw_" + output, "nothing"], [output]),
    ])
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return target


@pytest.fixture(scope="module")
def served(platform_home: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[ServedPlatform, ServiceProcess, str]]:
    settings = platform_home.settings
    faulty = _failing_at_run_time(platform_home.onnx_path, tmp_path_factory.mktemp("faulty") / "model.onnx")
    client = activate(settings).client
    run_id = client.create_run(registry.ensure_experiment(settings)).info.run_id
    model_uri = log_model_to_mlflow(run_id, ExportResult(faulty, 0.0))
    client.set_terminated(run_id)
    candidate = registry.register_version(settings, model_uri, run_id, {"test": "fails at run time"})
    env = {"MLOPS_HOME": str(settings.resolved_home), "MLOPS_MODEL_POLL_INTERVAL_S": "0.2"}
    service = start_service(env, tmp_path_factory.mktemp("logs") / "service.log")
    try:
        yield platform_home, service, candidate
    finally:
        service.stop()


def test_a_canary_failing_at_run_time_is_answered_by_the_champion_and_rolled_back_on_its_error_rate(
        served: tuple[ServedPlatform, ServiceProcess, str]) -> None:
    platform, service, candidate = served
    champion = platform.version
    body = sample_body(platform)
    mlops("model", "promote", candidate, "--canary", "50", "--reason", "a candidate that fails live")
    deadline = time.monotonic() + 60
    while not read_failures(failure_dir(platform.settings)):  # the service has loaded the canary
        assert time.monotonic() < deadline, "the canary was never tried"
        httpx.post(service.url + "/predict", json={**body, "transaction_id": f"T-warm-{time.monotonic_ns()}"},
                   timeout=30)

    statuses: Counter[int] = Counter()
    versions: Counter[str] = Counter()
    for start in range(0, REQUESTS, BATCH):
        instances = [{**body, "customer_id": f"C-fault-{n % CUSTOMERS}", "transaction_id": f"T-fault-{n}"}
                     for n in range(start, start + BATCH)]
        response = httpx.post(service.url + "/predict/batch", json={"instances": instances}, timeout=60)
        statuses[response.status_code] += 1
        versions.update(p["model_version"] for p in response.json().get("predictions", []))

    assert statuses == {200: REQUESTS // BATCH}  # no customer saw the canary fail
    assert versions == {champion: REQUESTS}
    failures = read_failures(failure_dir(platform.settings))
    assert {(f.role, f.model_version) for f in failures} == {("canary", candidate)}
    assert all("Gather" in f.error or "indices" in f.error for f in failures), failures[0].error
    logged = read_prediction_frame(log_dir(platform.settings))
    fault = logged[logged["event_id"].str.startswith("T-fault-")]
    assert set(zip(fault["model_version"], fault["role"], strict=True)) == {(champion, "champion")}
    # About half the customers are the canary's (sticky by customer): their rows failed there first.
    assert 0.3 * REQUESTS < sum(f.rows for f in failures) < 0.7 * REQUESTS + 200  # + the warm-up's

    judged = mlops("model", "canary", "judge")

    assert "verdict: roll back" in judged, judged
    assert "error rate: fail" in judged
    assert registry.alias_version(platform.settings) == champion  # production never moved
    assert registry.canary(platform.settings) is None
    # Every row the canary took failed; the champion failed none.
    assert "error rate: fail; canary 1 vs champion 0" in judged
