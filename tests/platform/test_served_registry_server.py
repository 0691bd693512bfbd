"""mlops.served_registry against a real MLflow tracking server: the REST reader a service uses answers
what MLflow's own client answers (every alias, the canary and its share, each version's files through
the server's artifact proxy, its run) after every move the registry makes, and an unreachable server
is an outage, never "no model"."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mlflow_models import identity_model, logged_model

from benchmarks.serving_side_by_side import free_port
from mlops import registry
from mlops.errors import RegistryError
from mlops.registry import ONNX_FILE
from mlops.served_registry import MlflowServedRegistry, RestServedRegistry, ServedRegistry, served_registry
from mlops.settings import Settings

pytestmark = pytest.mark.integration

ALIASES = ("production", "staging", "canary", "challenger")
READY_DEADLINE_S = 120  # a loaded machine starts MLflow's server in seconds; the deadline only bounds a hang


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain MLflow server (SQLite backend, artifacts served through it) of this module's own."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    command = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
               "--workers", "1", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
               "--serve-artifacts", "--artifacts-destination", str(root / "artifacts")]
    with (root / "server.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_DEADLINE_S
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert process.poll() is None, (root / "server.log").read_text()[-2000:]
        assert time.monotonic() < deadline, (root / "server.log").read_text()[-2000:]
        time.sleep(0.3)
    yield url
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture
def on_server(server: str, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings with the server as tracking store, a model name of the test's own."""
    return settings.model_copy(update={"tracking_uri": server, "model_name": f"served-{os.urandom(4).hex()}"})


def _answers(reader: ServedRegistry, versions: list[str], tmp_path: Path) -> dict[str, object]:
    answers: dict[str, object] = {alias: reader.alias_version(alias) for alias in ALIASES}
    answers["canary share"] = reader.canary()
    for version in versions:
        served = reader.download_version(version, tmp_path / type(reader).__name__ / version)
        folder = served.onnx_path.parent
        files = sorted((str(p.relative_to(folder)), p.read_bytes()) for p in folder.rglob("*") if p.is_file())
        answers[version] = (served.version, served.run_id, served.onnx_path.read_bytes(), files)
    return answers


def test_the_rest_reader_answers_what_mlflow_answers_after_every_move(on_server: Settings, tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    rest = served_registry(on_server)
    request.addfinalizer(rest.close)
    assert isinstance(rest, RestServedRegistry)
    via_mlflow = MlflowServedRegistry(on_server)
    versions: list[str] = []

    def same() -> dict[str, object]:
        answers = _answers(rest, versions, tmp_path)
        assert answers == _answers(via_mlflow, versions, tmp_path)
        return answers

    assert same()["production"] is None  # the model is not registered yet
    uri, run_id = logged_model(on_server)
    versions += [registry.register_version(on_server, uri, run_id, {}) for _ in range(3)]
    v1, v2, v3 = versions
    registry.promote(on_server, v1, expected=None, actor="alice")
    registry.promote(on_server, v2, alias="challenger", expected=None, actor="bob")
    registry.start_canary(on_server, v2, 20, actor="bob", reason="")
    registry.rollback(on_server, actor="carol", reason="not yet")
    registry.start_canary(on_server, v3, 10, actor="bob", reason="")
    registry.start_canary(on_server, v3, 35, actor="bob", reason="more")
    assert same()["canary share"] == (v3, 35.0)
    # Moved back by hand (the UI): v2's own share, older than v3's in the same run.
    client = registry.client(on_server)
    client.set_registered_model_alias(on_server.model_name, registry.CANARY_ALIAS, v2)
    assert same()["canary share"] == (v2, 20.0)
    registry.promote(on_server, v2, expected=v1, actor="alice")  # promoting the canary ends it
    answers = same()
    assert (answers["production"], answers["canary share"]) == (v2, None)
    # A version whose files hold a folder (a graph's weights beside it, say): fetched whole through the proxy.
    bundle = tmp_path / "bundle"
    (bundle / "weights").mkdir(parents=True)
    (bundle / ONNX_FILE).write_bytes(identity_model().SerializeToString())
    (bundle / "weights" / "part-0.bin").write_bytes(b"\x00\x01 weights")
    client.log_artifacts(run_id, str(bundle), "bundle")
    versions.append(str(client.create_model_version(on_server.model_name, f"runs:/{run_id}/bundle",
                                                    run_id=run_id).version))
    nested = same()[versions[-1]]
    assert ("weights/part-0.bin", b"\x00\x01 weights") in nested[3]  # type: ignore[index]


def test_an_answer_that_is_not_mlflows_is_a_failed_read_not_no_model(on_server: Settings, tmp_path: Path) -> None:
    """A proxy's page at the API's route (HTTP 200, HTML): RegistryError, never "no model"."""
    page = tmp_path / "api" / "2.0" / "mlflow" / "registered-models" / "get"
    page.parent.mkdir(parents=True)
    page.write_text("<html>sign in</html>")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as proxy:
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        reader = served_registry(on_server.model_copy(
            update={"tracking_uri": f"http://127.0.0.1:{proxy.server_address[1]}"}))
        try:
            with pytest.raises(RegistryError, match="answered HTTP 200 without MLflow's JSON"):
                reader.alias_version("production")
        finally:
            reader.close()
            proxy.shutdown()


def test_an_unreachable_server_is_an_outage(on_server: Settings) -> None:
    dead = served_registry(on_server.model_copy(update={"tracking_uri": f"http://127.0.0.1:{free_port()}"}))
    try:
        with pytest.raises(RegistryError, match="model registry unreachable: ConnectError"):
            dead.alias_version("production")
    finally:
        dead.close()


def test_mlflows_tls_and_auth_plugin_settings_keep_mlflows_client(on_server: Settings,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_INSECURE_TLS", "true")
    assert isinstance(served_registry(on_server), MlflowServedRegistry)

