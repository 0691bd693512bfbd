"""infra/docker/mlflow/create_user.py (docker-compose's mlflow-users, the Job mlflow-serving-user and
the CronJob mlflow-serving-user-sync) against a real `mlflow server --app-name basic-auth` with the
compose image's auth config: the user it creates reads what the admin wrote and cannot change it; a
later run leaves a user whose password still signs in alone and sets a rotated one.
(Without MLflow's workspaces every authenticated user may still create experiments and models of its
own; none of the admin's experiments, runs or registered models.)"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from pydantic import SecretStr

from infra.manifests import REPO_ROOT

pytestmark = pytest.mark.integration

MLFLOW_DIR = REPO_ROOT / "infra" / "docker" / "mlflow"
SCRIPT = MLFLOW_DIR / "create_user.py"
ADMIN = ("admin", secrets.token_urlsafe(16))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mlflow-auth")


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[str]:
    """The basic-auth app on the compose image's basic_auth.ini, its user store moved under tmp."""
    ini = (MLFLOW_DIR / "basic_auth.ini").read_text().replace(
        "sqlite:////var/lib/mlflow-auth/basic_auth.db", f"sqlite:///{root / 'basic_auth.db'}")
    assert str(root) in ini  # the committed config's store path is the one replaced
    (root / "basic_auth.ini").write_text(ini)
    port = _free_port()
    env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(root / "basic_auth.ini"),
           "MLFLOW_AUTH_ADMIN_USERNAME": ADMIN[0], "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN[1],
           "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_urlsafe(32),
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or "mlflow"
    log = (root / "server.log").open("w")
    process = subprocess.Popen(
        [mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--app-name", "basic-auth",
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts")],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            assert process.poll() is None, (root / "server.log").read_text()[-2000:]
            assert time.monotonic() < deadline, (root / "server.log").read_text()[-2000:]
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def _create_user(url: str, username: str, password: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    password_file = tmp_path / f"{username}.password"
    password_file.write_text(password + "\n")
    env = {"PATH": os.environ["PATH"], "MLFLOW_TRACKING_URI": url, "MLFLOW_TRACKING_USERNAME": ADMIN[0],
           "MLFLOW_TRACKING_PASSWORD": ADMIN[1], "MLFLOW_NEW_USERNAME": username,
           "MLFLOW_NEW_PASSWORD_FILE": str(password_file), "MLFLOW_WAIT_S": "10"}
    # The image's python runs it as a plain file: nothing of this repository is importable there.
    return subprocess.run([sys.executable, "-I", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def _api(url: str, method: str, path: str, auth: tuple[str, str], **params: Any) -> requests.Response:
    query = method in ("GET", "DELETE")
    return requests.request(method, f"{url}/api/2.0/mlflow/{path}", auth=auth, timeout=10,
                            params=params if query else None, json=None if query else params)


def test_the_created_user_reads_what_the_admin_wrote_and_cannot_write(server: str, tmp_path: Path) -> None:
    created = _api(server, "POST", "experiments/create", ADMIN, name="fraud")
    assert created.ok, created.text
    experiment = created.json()["experiment_id"]
    run = _api(server, "POST", "runs/create", ADMIN, experiment_id=experiment)
    assert run.ok, run.text
    model = _api(server, "POST", "registered-models/create", ADMIN, name="fraud-detector")
    assert model.ok, model.text

    password = secrets.token_urlsafe(16)
    done = _create_user(server, "serving", password, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "create_user: serving created"
    assert password not in done.stdout + done.stderr
    reader = ("serving", password)

    assert _api(server, "GET", "experiments/get", reader, experiment_id=experiment).status_code == 200
    assert _api(server, "GET", "runs/get", reader, run_id=run.json()["run"]["info"]["run_id"]).status_code == 200
    assert _api(server, "POST", "runs/create", reader, experiment_id=experiment).status_code == 403
    assert _api(server, "POST", "experiments/update", reader, experiment_id=experiment,
                new_name="renamed").status_code == 403
    assert _api(server, "GET", "registered-models/get", reader, name="fraud-detector").status_code == 200
    # The registry's promotions are the admin's: no alias, no new version, no rename, no deletion.
    assert _api(server, "POST", "registered-models/alias", reader, name="fraud-detector", alias="production",
                version="1").status_code == 403
    assert _api(server, "POST", "model-versions/create", reader, name="fraud-detector",
                source="s3://x/model").status_code == 403
    assert _api(server, "PATCH", "registered-models/update", reader, name="fraud-detector",
                description="changed").status_code == 403
    assert _api(server, "DELETE", "registered-models/delete", reader, name="fraud-detector").status_code == 403
    assert _api(server, "POST", "users/create", reader, username="x", password="y").status_code == 403
    assert _api(server, "GET", "experiments/get", ("serving", "wrong"), experiment_id=experiment).status_code == 401


def _password_hash(root: Path, username: str) -> str:
    """The user store's row for USERNAME (a new salt on every password write)."""
    with sqlite3.connect(root / "basic_auth.db") as store:
        row = store.execute("SELECT password_hash FROM users WHERE username = ?", (username,)).fetchone()
    assert row is not None, username
    return str(row[0])


def _signs_in(server: str, user: tuple[str, str]) -> int:
    return _api(server, "GET", "experiments/search", user, max_results=1).status_code


def test_each_scheduled_run_leaves_a_current_password_alone_and_sets_a_rotated_one(
        server: str, root: Path, tmp_path: Path) -> None:
    """What the CronJob does every 10 minutes: the same password file -> nothing written; the Secret
    rotated (the file now holds another password) -> the next run sets it, the old one gets 401."""
    first, second = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    assert _create_user(server, "rotated", first, tmp_path).stdout.strip() == "create_user: rotated created"
    stored = _password_hash(root, "rotated")

    same = _create_user(server, "rotated", first, tmp_path)
    assert same.returncode == 0, same.stderr
    assert same.stdout.strip() == "create_user: rotated unchanged"
    assert _password_hash(root, "rotated") == stored  # an update would have re-hashed it
    assert _signs_in(server, ("rotated", first)) == 200

    rotated = _create_user(server, "rotated", second, tmp_path)  # the same file, its content rotated
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip() == "create_user: rotated updated"
    assert first not in rotated.stdout + rotated.stderr
    assert second not in rotated.stdout + rotated.stderr
    assert _password_hash(root, "rotated") != stored
    assert _signs_in(server, ("rotated", second)) == 200
    assert _signs_in(server, ("rotated", first)) == 401

    settled = _create_user(server, "rotated", second, tmp_path)
    assert settled.stdout.strip() == "create_user: rotated unchanged", settled.stderr
    assert _signs_in(server, ("rotated", second)) == 200


def test_a_wrong_admin_password_fails_without_creating_anyone(server: str, tmp_path: Path) -> None:
    password_file = tmp_path / "p"
    password_file.write_text("secret-of-the-new-user")
    env = {"PATH": os.environ["PATH"], "MLFLOW_TRACKING_URI": server, "MLFLOW_TRACKING_USERNAME": ADMIN[0],
           "MLFLOW_TRACKING_PASSWORD": "not-the-admins", "MLFLOW_NEW_USERNAME": "intruder",
           "MLFLOW_NEW_PASSWORD_FILE": str(password_file)}
    failed = subprocess.run([sys.executable, "-I", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1
    assert "creating intruder answered 401" in failed.stderr
    assert _api(server, "GET", "users/get", ADMIN, username="intruder").status_code == 404


def test_a_running_client_follows_its_rotated_password_file_without_a_restart(
        server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prediction service reads MLOPS_TRACKING_PASSWORD_FILE on every registry call, so a Secret
    rotated in place (the kubelet rewrites the mounted file) and set by the CronJob's next run reaches
    running replicas; a process that read the password once at start is locked out (401)."""
    from mlops import registry
    from mlops.errors import RegistryError
    from mlops.settings import Settings

    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)  # connect() sets them for MLflow: restored after the test
    model = _api(server, "POST", "registered-models/create", ADMIN, name="rotation-model")
    assert model.ok, model.text
    first, second = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    assert _create_user(server, "replica", first, tmp_path).returncode == 0
    from_file = Settings(home=tmp_path / "home", tracking_uri=server, tracking_username="replica",
                         model_name="rotation-model", tracking_http_retries=0,
                         tracking_password_file=tmp_path / "replica.password")
    read_once = from_file.model_copy(update={"tracking_password_file": None, "tracking_password": SecretStr(first)})
    assert registry.aliases(from_file) == registry.aliases(read_once) == {}

    assert _create_user(server, "replica", second, tmp_path).stdout.strip() == "create_user: replica updated"

    assert registry.aliases(from_file) == {}  # the same settings object, the file's new password
    with pytest.raises(RegistryError) as locked_out:
        registry.aliases(read_once)
    assert first not in str(locked_out.value)
    assert second not in str(locked_out.value)
