"""Authentication in the built Kubernetes manifests (kubectl kustomize, every overlay): MLflow's
basic-auth app, Redis' requirepass, every client's credentials from Secrets, no password in an
argument or a literal; and the MLflow init container's script run here on the committed template."""

from __future__ import annotations

import configparser
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from infra.auth_policy import environment, is_secret_file, servers_authenticate_and_clients_use_secrets
from infra.manifests import OVERLAYS
from infra.manifests import find_object as find
from infra.pods import PodTemplate, pod_templates

pytestmark = pytest.mark.integration

Objects = list[dict[str, Any]]
# Every pod that talks to MLflow or Redis, by owner, with the MLflow Secret it must use.
CLIENTS = {"Deployment/mlops/prediction-service": "mlflow-serving", "CronJob/mlops/drift-check": "mlflow-admin",
           "CronJob/mlops/canary-judge": "mlflow-admin", "Job/mlops/mlflow-serving-user": "mlflow-admin",
           "CronJob/mlops/mlflow-serving-user-sync": "mlflow-admin"}


def _pod(objects: Objects, where: str) -> PodTemplate:
    return next(pod for pod in pod_templates(objects) if pod.where.startswith(where))


def _mlflow(objects: Objects) -> dict[str, Any]:
    spec: dict[str, Any] = find(objects, "Deployment", "mlflow")["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mlflow_runs_the_basic_auth_app_without_a_password_in_its_arguments(
        built: dict[str, Objects], overlay: str) -> None:
    server = _mlflow(built[overlay])["containers"][0]
    assert server["command"] == ["mlflow", "server"]
    assert "--app-name=basic-auth" in server["args"]
    assert not any("backend-store-uri" in arg or "$(" in arg for arg in server["args"])
    env = {variable["name"]: variable for variable in server["env"]}
    for name, key in [("MLFLOW_BACKEND_STORE_URI", "uri"), ("MLFLOW_AUTH_ADMIN_USERNAME", "username"),
                      ("MLFLOW_AUTH_ADMIN_PASSWORD", "password"),
                      ("MLFLOW_FLASK_SERVER_SECRET_KEY", "flask-secret-key")]:
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"]["key"] == key
    assert env["MLFLOW_AUTH_CONFIG_PATH"]["value"] == "/etc/mlflow-auth/basic_auth.ini"


def test_the_auth_config_lets_an_ungranted_user_read_and_holds_no_secret(built: dict[str, Objects]) -> None:
    config = configparser.ConfigParser(interpolation=None)
    config.read_string(find(built["prod"], "ConfigMap", "mlflow-auth")["data"]["basic_auth.ini"])
    assert config["mlflow"]["default_permission"] == "READ"
    assert not {"admin_password", "admin_username", "database_uri"} & set(config["mlflow"])
    assert config["mlflow"].getint("auth_cache_ttl_seconds") == 60  # a password hashed once a minute, not per request


def test_the_init_container_writes_the_config_with_the_user_store_uri(built: dict[str, Objects],
                                                                       tmp_path: Path) -> None:
    """The init container's script, run here on the ConfigMap's template: a 0600 file with the URI."""
    spec = _mlflow(built["prod"])
    init = spec["initContainers"][0]
    assert init["env"] == [{"name": "MLFLOW_AUTH_DATABASE_URI",
                            "valueFrom": {"secretKeyRef": {"name": "mlflow-postgres", "key": "auth-uri"}}}]
    (tmp_path / "template").mkdir()
    (tmp_path / "template" / "basic_auth.ini").write_text(
        find(built["prod"], "ConfigMap", "mlflow-auth")["data"]["basic_auth.ini"])
    script = init["args"][0].replace("/etc/mlflow-auth-template/", f"{tmp_path}/template/").replace(
        "/etc/mlflow-auth/", f"{tmp_path}/")
    uri = "postgresql+psycopg2://auth:p%25ss@db:5432/mlflow_auth"
    subprocess.run([sys.executable, *init["command"][1:], script], check=True, timeout=30,
                   env={**os.environ, "MLFLOW_AUTH_DATABASE_URI": uri})
    written = tmp_path / "basic_auth.ini"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    config = configparser.ConfigParser(interpolation=None)
    config.read(written)
    assert config["mlflow"]["database_uri"] == uri
    assert config["mlflow"]["default_permission"] == "READ"
    mounts = {mount["mountPath"]: mount["name"] for mount in spec["containers"][0]["volumeMounts"]}
    assert mounts["/etc/mlflow-auth"] == "auth-config"
    assert {"name": "auth-config", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in spec["volumes"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_client_gets_its_credentials_from_secrets(built: dict[str, Objects], overlay: str) -> None:
    objects = built[overlay]
    assert servers_authenticate_and_clients_use_secrets(objects) == []
    for where, secret in CLIENTS.items():
        if overlay == "kserve" and "prediction-service" in where:
            continue  # KServe serves the exported model, no MLflow client
        pod = _pod(objects, where)
        container = pod.containers[0]
        env = environment(objects, pod, container)
        prefix = "MLFLOW_" if "mlflow-serving-user" in where else "MLOPS_"
        assert env[f"{prefix}TRACKING_USERNAME"]["valueFrom"]["secretKeyRef"]["name"] == secret
        password = env[f"{prefix}TRACKING_PASSWORD_FILE"]
        assert is_secret_file(pod, container, password)
        volumes = {volume["name"]: volume for volume in pod.spec["volumes"]}
        mount = next(m for m in container["volumeMounts"] if password["value"].startswith(m["mountPath"] + "/"))
        assert volumes[mount["name"]]["secret"]["secretName"] == secret
        if prefix == "MLOPS_":
            assert is_secret_file(pod, container, env["MLOPS_REDIS_PASSWORD_FILE"])
            assert "@" not in env["MLOPS_REDIS_URL"]["value"]


def test_the_service_reads_mlflow_as_the_user_the_job_creates(built: dict[str, Objects]) -> None:
    objects = built["prod"]
    for where in ("Job/mlops/mlflow-serving-user", "CronJob/mlops/mlflow-serving-user-sync"):
        pod = _pod(objects, where)
        job = pod.containers[0]
        assert job["command"] == ["python", "/etc/mlflow/create_user.py"]
        assert job["image"] == _mlflow(objects)["containers"][0]["image"]
        env = {variable["name"]: variable for variable in job["env"]}
        assert env["MLFLOW_NEW_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-serving",
                                                                           "key": "username"}
        assert env["MLFLOW_TRACKING_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-admin",
                                                                                "key": "username"}
        # The new user's password is the service's own file: the Secret the service mounts.
        assert is_secret_file(pod, job, env["MLFLOW_NEW_PASSWORD_FILE"])
        volumes = {volume["name"]: volume for volume in pod.spec["volumes"]}
        mount = next(m for m in job["volumeMounts"]
                     if env["MLFLOW_NEW_PASSWORD_FILE"]["value"].startswith(m["mountPath"] + "/"))
        assert volumes[mount["name"]]["secret"]["secretName"] == "mlflow-serving"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_rotated_serving_password_is_set_by_a_cronjob_running_the_jobs_pod(
        built: dict[str, Objects], overlay: str) -> None:
    """The install-time Job and the CronJob that keeps the user in step with its Secret run one pod
    spec, hardened like the platform's other jobs; the CronJob never overlaps itself."""
    objects = built[overlay]
    job, sync = _pod(objects, "Job/mlops/mlflow-serving-user"), _pod(objects, "CronJob/mlops/mlflow-serving-user-sync")
    assert sync.spec == job.spec
    cronjob = find(objects, "CronJob", "mlflow-serving-user-sync")["spec"]
    assert cronjob["schedule"] == "*/10 * * * *"
    assert cronjob["concurrencyPolicy"] == "Forbid"
    assert cronjob["successfulJobsHistoryLimit"] <= 3
    assert cronjob["failedJobsHistoryLimit"] <= 3
    # A run ends before the next one is due (every 10 minutes).
    assert cronjob["jobTemplate"]["spec"]["activeDeadlineSeconds"] < 600
    spec = sync.spec
    assert spec["priorityClassName"] in {o["metadata"]["name"] for o in objects if o["kind"] == "PriorityClass"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"]:
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert "memory" in container["resources"]["limits"]


@pytest.mark.parametrize("overlay", ["prod", "volcano"])
def test_training_pods_get_the_pipelines_account_from_a_secret(built: dict[str, Objects], overlay: str) -> None:
    training = [pod for pod in pod_templates(built[overlay]) if pod.namespace == "team-fraud"
                and any(variable.get("name") == "MLOPS_TRACKING_URI"
                        for container in pod.containers for variable in container.get("env", []))]
    assert training
    for pod in training:
        env = environment(built[overlay], pod, pod.containers[0])
        for name, key in [("MLOPS_TRACKING_USERNAME", "username"), ("MLOPS_TRACKING_PASSWORD", "password")]:
            assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-admin", "key": key}


def test_redis_requires_the_password_of_its_secret(built: dict[str, Objects]) -> None:
    pod = _pod(built["prod"], "StatefulSet/mlops/redis")
    redis = pod.containers[0]
    script = " ".join(redis["args"])
    assert "requirepass" in script
    assert "$(cat /var/run/secrets/redis/password)" in script
    assert is_secret_file(pod, redis, {"value": "/var/run/secrets/redis/password"})
    assert redis["env"] == [{"name": "REDISCLI_AUTH",
                             "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "password"}}}]
    assert redis["readinessProbe"]["exec"]["command"] == ["redis-cli", "ping"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_object_and_no_secret_literal(built: dict[str, Objects], overlay: str) -> None:
    assert not [obj for obj in built[overlay] if obj.get("kind") == "Secret"]
    for pod in pod_templates(built[overlay]):
        for container in pod.containers:
            for variable in container.get("env", []):
                if any(word in variable["name"] for word in ("PASSWORD", "SECRET", "AUTH")) and "value" in variable:
                    assert variable["name"].endswith(("_FILE", "_PATH")), (pod.where, variable)
                    assert variable["value"].startswith("/"), (pod.where, variable)


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (apt-get install -y redis-server)")
def test_the_redis_containers_script_starts_a_server_that_requires_the_password(
        built: dict[str, Objects], tmp_path: Path) -> None:
    """The StatefulSet's shell line, run here with its paths moved under tmp (and a free port): Redis
    refuses a client without the Secret's password, accepts it, and no command line carries it."""
    redis_container = _pod(built["prod"], "StatefulSet/mlops/redis").containers[0]
    password = secrets.token_urlsafe(16)
    (tmp_path / "password").write_text(password)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = " ".join(redis_container["args"])
    for old, new in [("/var/run/secrets/redis/password", str(tmp_path / "password")),
                     ("/tmp/redis.conf", str(tmp_path / "redis.conf")), ("dir /data", f"dir {tmp_path}")]:
        assert old in script
        script = script.replace(old, new)
    script += f" --port {port} --bind 127.0.0.1"
    process = subprocess.Popen([*redis_container["command"], script], env={"PATH": os.environ["PATH"]})
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                assert redis.Redis(port=port, password=password, socket_timeout=2).ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=2).set("k", "v")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, password="wrong", socket_timeout=2).ping()
        assert password not in Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
        assert redis.Redis(port=port, password=password).config_get("appendonly") == {"appendonly": "yes"}
    finally:
        process.terminate()
        process.wait(timeout=10)
