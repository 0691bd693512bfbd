"""Standard Open Inference Protocol clients with their defaults, against the service in its own
process: tritonclient.http (binary tensor data extension) and tritonclient.grpc (the gRPC service
on its own port), and the docs pages rendered by a headless browser with the network off.

One served platform for the module (about a minute to build) and one service process on it.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as oip_grpc
import tritonclient.http as oip_http
from served_platform import ServedPlatform, sample_body
from service_process import ServiceProcess, free_port, start_service

from mlops.inference import OnnxModel
from mlops.prediction_log import PredictionRecord, log_dir, read_predictions

pytestmark = pytest.mark.integration

ROWS = 6


@dataclass
class Served:
    platform: ServedPlatform
    service: ServiceProcess
    grpc_address: str

    @property
    def name(self) -> str:
        return self.platform.settings.model_name


@pytest.fixture(scope="module")
def served(platform_home: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    grpc_port = free_port()
    env = {"MLOPS_HOME": str(platform_home.settings.resolved_home), "MLOPS_GRPC_PORT": str(grpc_port)}
    service = start_service(env, tmp_path_factory.mktemp("logs") / "service.log")
    try:
        yield Served(platform_home, service, f"127.0.0.1:{grpc_port}")
    finally:
        service.stop()


@pytest.fixture(scope="module")
def decided(served: Served) -> tuple[list[dict[str, Any]], list[float]]:
    """/predict's decision inputs (raw fields and features, as logged) and its probabilities, for ROWS requests."""
    body = sample_body(served.platform)
    answers = [httpx.post(served.service.url + "/predict", timeout=10,
                          json={**body, "transaction_id": f"T-std-{i}", "amount": 10.0 + 97.5 * i}).json()
               for i in range(ROWS)]
    logged = {r.event_id: r for r in read_predictions(log_dir(served.platform.settings))}
    records = [logged[a["transaction_id"]] for a in answers]
    return [{**r.inputs, **r.features} for r in records], [a["probability"] for a in answers]


def _arrays(model: OnnxModel, rows: list[dict[str, Any]]) -> dict[str, tuple[np.ndarray, str]]:
    arrays = {}
    for graph_input in model.session.get_inputs():
        text = graph_input.type == "tensor(string)"
        values = np.array([[str(r[graph_input.name]).encode() if text else r[graph_input.name]] for r in rows],
                          dtype=np.object_ if text else np.float32)
        arrays[graph_input.name] = (values, "BYTES" if text else "FP32")
    return arrays


def _logged_since(served: Served, count: int) -> list[PredictionRecord]:
    return read_predictions(log_dir(served.platform.settings))[-count:]


def test_tritonclient_http_with_binary_tensors_matches_predict_and_the_model_in_process(
        served: Served, decided: tuple[list[dict[str, Any]], list[float]]) -> None:
    rows, predicted = decided
    model = OnnxModel(served.platform.onnx_path)
    client = oip_http.InferenceServerClient(url=served.service.url.removeprefix("http://"))
    inputs = []
    for name, (values, datatype) in _arrays(model, rows).items():
        tensor = oip_http.InferInput(name, list(values.shape), datatype)
        tensor.set_data_from_numpy(values)  # binary_data=True: the client's default
        inputs.append(tensor)

    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(served.name)
    metadata = client.get_model_metadata(served.name)
    result = client.infer(served.name, inputs, request_id="http-binary")  # all outputs binary (the default)

    assert result.get_response()["outputs"][0]["parameters"] == {"binary_data_size": 4 * ROWS}
    scores = result.as_numpy(model.output_name).reshape(-1)
    np.testing.assert_allclose(scores, model.predict_proba(rows), atol=1e-6)
    np.testing.assert_allclose(scores, predicted, atol=1e-6)
    assert [i["name"] for i in metadata["inputs"]] == model.input_names
    logged = _logged_since(served, ROWS)
    assert [r.event_id for r in logged] == [f"http-binary/{i}" for i in range(ROWS)]
    np.testing.assert_allclose([r.probability for r in logged], scores, atol=1e-6)


def test_tritonclient_grpc_with_its_defaults_matches_predict_and_the_model_in_process(
        served: Served, decided: tuple[list[dict[str, Any]], list[float]]) -> None:
    rows, predicted = decided
    model = OnnxModel(served.platform.onnx_path)
    client = oip_grpc.InferenceServerClient(url=served.grpc_address)
    inputs = []
    for name, (values, datatype) in _arrays(model, rows).items():
        tensor = oip_grpc.InferInput(name, list(values.shape), datatype)
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)

    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready(served.name)
    assert not client.is_model_ready("another-model")
    metadata = client.get_model_metadata(served.name, as_json=True)
    result = client.infer(served.name, inputs, request_id="grpc-default")

    scores = result.as_numpy(model.output_name).reshape(-1)
    np.testing.assert_allclose(scores, model.predict_proba(rows), atol=1e-6)
    np.testing.assert_allclose(scores, predicted, atol=1e-6)
    assert [i["name"] for i in metadata["inputs"]] == model.input_names
    assert metadata["versions"] == [served.platform.version]
    logged = _logged_since(served, ROWS)
    assert [r.event_id for r in logged] == [f"grpc-default/{i}" for i in range(ROWS)]
    assert {r.model_version for r in logged} == {served.platform.version}


def _binary_body(served: Served, rows: list[dict[str, Any]], *, cut: int = 0, extra: bytes = b""
                 ) -> tuple[bytes, int]:
    """An infer body in the binary layout, its last input cut short by ``cut`` bytes, ``extra`` appended."""
    model = OnnxModel(served.platform.onnx_path)
    header: dict[str, Any] = {"inputs": []}
    payload = b""
    for name, (values, datatype) in _arrays(model, rows).items():
        flat = values.reshape(-1)
        raw = (b"".join(struct.pack("<I", len(v)) + v for v in flat) if datatype == "BYTES"
               else flat.astype("<f4").tobytes())
        header["inputs"].append({"name": name, "shape": [len(rows), 1], "datatype": datatype,
                                 "parameters": {"binary_data_size": len(raw)}})
        payload += raw
    text = httpx.Request("POST", "/", json=header).content
    return text + payload[:len(payload) - cut] + extra, len(text)


@pytest.mark.parametrize(("cut", "extra", "named"), [(1, b"", "binary_data_size"), (0, b"\0\0", "bytes after")])
def test_a_binary_body_that_does_not_add_up_is_a_422_naming_it(
        served: Served, decided: tuple[list[dict[str, Any]], list[float]], cut: int, extra: bytes, named: str
) -> None:
    content, header_length = _binary_body(served, decided[0], cut=cut, extra=extra)
    response = httpx.post(f"{served.service.url}/v2/models/{served.name}/infer", content=content, timeout=10,
                          headers={"inference-header-content-length": str(header_length)})

    assert response.status_code == 422, response.text
    assert named in response.json()["error"]


def test_a_json_request_may_ask_for_a_binary_output(
        served: Served, decided: tuple[list[dict[str, Any]], list[float]]) -> None:
    rows, predicted = decided
    model = OnnxModel(served.platform.onnx_path)
    tensors = [{"name": name, "shape": list(values.shape), "datatype": datatype,
                "data": [v.decode() if isinstance(v, bytes) else float(v) for v in values.reshape(-1)]}
               for name, (values, datatype) in _arrays(model, rows).items()]
    response = httpx.post(f"{served.service.url}/v2/models/{served.name}/infer", timeout=10, json={
        "inputs": tensors, "outputs": [{"name": model.output_name, "parameters": {"binary_data": True}}]})

    header_length = int(response.headers["inference-header-content-length"])
    assert response.headers["content-type"] == "application/octet-stream"
    np.testing.assert_allclose(np.frombuffer(response.content[header_length:], "<f4"), predicted, atol=1e-6)


def test_grpc_errors_are_statuses_naming_the_problem(served: Served) -> None:
    client = oip_grpc.InferenceServerClient(url=served.grpc_address)
    tensor = oip_grpc.InferInput("amount", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[1.0]], dtype=np.float32))

    with pytest.raises(oip_grpc.InferenceServerException) as unknown_model:
        client.get_model_metadata("another-model")
    with pytest.raises(oip_grpc.InferenceServerException) as missing_inputs:
        client.infer(served.name, [tensor])

    assert unknown_model.value.status() == str(grpc.StatusCode.NOT_FOUND)
    assert "another-model" in unknown_model.value.message()
    assert missing_inputs.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    assert "missing" in missing_inputs.value.message()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="needs Debian's chromium")
@pytest.mark.parametrize(("page", "rendered"), [("/docs", 'class="opblock-summary-path"'), ("/redoc", "/predict")])
def test_docs_pages_render_with_the_network_off(served: Served, tmp_path: Path, page: str, rendered: str) -> None:
    # Every host but the service's own resolves to nothing: a page that needs a CDN stays blank.
    dom = subprocess.run(
        [str(_chromium()), "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
         "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--virtual-time-budget=15000",
         "--dump-dom", served.service.url + page],
        capture_output=True, text=True, timeout=90, check=True).stdout

    assert rendered in dom
    assert "/v2/models/{name}/infer" in dom
