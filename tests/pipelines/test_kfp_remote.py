"""`mlops pipeline submit` / `schedule` against a stand-in KFP API on loopback: the real kfp.Client
sends its requests, the stand-in records them, and the test checks them against the KFP server
API's own models (kfp_server_api). No Kubeflow is needed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kfp_server_api
import pytest
import yaml
from typer.testing import CliRunner

from mlops.errors import ClusterError, InputError
from mlops_cli.app import app
from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE
from pipelines.orchestration.kfp_remote import kfp_cron, schedule, submit

Recorded = list[tuple[str, str, dict[str, Any]]]


class _KfpStandIn(BaseHTTPRequestHandler):
    """Answers the v2beta1 routes kfp.Client uses for experiments, runs and recurring runs."""

    recorded: Recorded

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self.recorded.append(("GET", self.path, {}))
        if self.path.startswith("/apis/v2beta1/healthz"):
            self._answer(200, {"multi_user": False})
        elif self.path.startswith("/apis/v2beta1/experiments"):
            self._answer(200, {"experiments": [], "total_size": 0})
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.recorded.append(("POST", self.path, body))
        if self.path == "/apis/v2beta1/experiments":
            self._answer(200, {**body, "experiment_id": "exp-1"})
        elif self.path == "/apis/v2beta1/recurringruns":
            self._answer(200, {**body, "recurring_run_id": "rr-1"})
        elif self.path == "/apis/v2beta1/runs":
            self._answer(200, {**body, "run_id": "run-1"})
        else:
            self._answer(404, {"error": "not found"})

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def kfp_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[str, Recorded]]:
    monkeypatch.setenv("HOME", str(tmp_path))  # kfp.Client reads ~/.config/kfp/context.json
    recorded: Recorded = []
    handler = type("Handler", (_KfpStandIn,), {"recorded": recorded})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", recorded
    server.shutdown()
    server.server_close()


def _posted(recorded: Recorded, path: str) -> dict[str, Any]:
    return next(body for method, route, body in recorded if method == "POST" and route == path)


def _as_model(body: dict[str, Any], model: str) -> Any:
    """Deserialize with the KFP server API's own model, which silently drops unknown fields: so every
    field sent must be one the model declares, and survive the round trip."""
    client = kfp_server_api.ApiClient()
    model_class = getattr(kfp_server_api, model)
    assert set(body) <= set(model_class.attribute_map.values())
    parsed = client.deserialize(type("Response", (), {"data": json.dumps(body)})(), model)
    assert set(client.sanitize_for_serialization(parsed)) == set(body)
    return parsed


def _train_platform_settings(pipeline_spec: dict[str, Any]) -> dict[str, Any]:
    executors: dict[str, Any] = pipeline_spec["platform_spec"]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    return executors


@pytest.mark.integration
def test_schedule_sends_a_weekly_recurring_run_of_the_compiled_pipeline(kfp_api: tuple[str, Recorded]) -> None:
    host, recorded = kfp_api
    result = schedule(host, "s3://mlops-data/transactions/", cron="0 3 * * 1", experiment="fraud-detection",
                      name="weekly-retraining")
    assert (result.id, result.experiment_id) == ("rr-1", "exp-1")
    assert _posted(recorded, "/apis/v2beta1/experiments")["display_name"] == "fraud-detection"
    body = _posted(recorded, "/apis/v2beta1/recurringruns")
    run = _as_model(body, "V2beta1RecurringRun")
    assert run.trigger.cron_schedule.cron == "0 0 3 * * 1"
    assert (run.experiment_id, run.display_name, run.mode) == ("exp-1", "weekly-retraining", "ENABLE")
    assert int(run.max_concurrency) == 1
    assert run.no_catchup is True
    assert run.runtime_config.parameters == {"source": "s3://mlops-data/transactions/", "run_name": "weekly-retraining"}
    compiled = list(yaml.safe_load_all(COMPILED_PIPELINE.read_text()))
    assert run.pipeline_spec["pipeline_spec"] == compiled[0]
    assert "exec-train" in _train_platform_settings(run.pipeline_spec)


@pytest.mark.integration
def test_schedule_with_a_window_trains_each_run_on_the_weeks_before_it(kfp_api: tuple[str, Recorded]) -> None:
    host, recorded = kfp_api
    schedule(host, "s3://mlops-data/transactions/", cron="0 3 * * 1", experiment="fraud-detection",
             name="weekly-retraining", last_weeks=4)
    run = _as_model(_posted(recorded, "/apis/v2beta1/recurringruns"), "V2beta1RecurringRun")
    assert run.runtime_config.parameters["last_weeks"] == 4
    inputs = run.pipeline_spec["pipeline_spec"]["root"]["inputDefinitions"]["parameters"]
    assert {"since", "until", "last_weeks"} <= set(inputs)


@pytest.mark.integration
def test_submit_sends_one_run(kfp_api: tuple[str, Recorded]) -> None:
    host, recorded = kfp_api
    result = submit(host, "s3://mlops-data/transactions/", experiment="fraud-detection", run_name="adhoc")
    assert result.id == "run-1"
    run = _as_model(_posted(recorded, "/apis/v2beta1/runs"), "V2beta1Run")
    assert (run.display_name, run.experiment_id) == ("adhoc", "exp-1")
    assert run.runtime_config.parameters["source"] == "s3://mlops-data/transactions/"


@pytest.mark.unit
@pytest.mark.parametrize(("cron", "expected"), [("0 3 * * 1", "0 0 3 * * 1"), ("30 0 3 * * MON", "30 0 3 * * MON")])
def test_cron_expressions_become_kfps_six_fields(cron: str, expected: str) -> None:
    assert kfp_cron(cron) == expected


@pytest.mark.unit
@pytest.mark.parametrize("cron", ["weekly", "0 3 * *", "0 3 * * 1 2 3", "0 3 * * $(reboot)"])
def test_a_bad_cron_is_refused_before_any_request(cron: str) -> None:
    with pytest.raises(InputError, match="invalid cron expression"):
        schedule("http://127.0.0.1:9", "s3://x/", cron=cron, experiment="e", name="n")


@pytest.mark.unit
def test_an_unreachable_endpoint_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ClusterError, match=r"^cannot reach Kubeflow Pipelines at http://127.0.0.1:9: "):
        submit("http://127.0.0.1:9", "s3://x/", experiment="e", run_name="r")


runner = CliRunner()


@pytest.mark.integration
def test_cli_schedule_prints_the_recurring_run(kfp_api: tuple[str, Recorded]) -> None:
    host, _recorded = kfp_api
    result = runner.invoke(app, ["pipeline", "schedule", "s3://mlops-data/transactions/", "--host", host])
    assert result.exit_code == 0, result.output
    assert "scheduled weekly-retraining (rr-1) in experiment exp-1" in result.output


@pytest.mark.unit
@pytest.mark.parametrize(("args", "message"), [
    (["pipeline", "schedule", "s3://x/", "--host", "http://127.0.0.1:9", "--cron", "weekly"], "invalid cron"),
    (["pipeline", "submit", "s3://x/"], "no Kubeflow Pipelines endpoint: pass --host or set MLOPS_KFP_HOST"),
    (["pipeline", "submit", "s3://x/", "--host", "kfp.local:80"], "KFP endpoint must be an http(s) URL"),
])
def test_cli_bad_input_exits_2_with_one_line(args: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLOPS_KFP_HOST", raising=False)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
