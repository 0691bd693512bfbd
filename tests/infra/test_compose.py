"""docker-compose.yml validates against the Compose schema and names only
what exists here; each deliberate breakage of a copy is caught for the right reason."""

from __future__ import annotations

import configparser
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.compose import COMPOSE_FILE, check, main
from infra.manifests import REPO_ROOT

pytestmark = pytest.mark.unit

Compose = dict[str, Any]
PROMETHEUS_DIR = REPO_ROOT / "monitoring" / "prometheus"


def test_the_committed_compose_file_is_sound() -> None:
    assert check() == []
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert {"postgres", "minio", "minio-init", "mlflow", "redis", "serving", "pushgateway", "prometheus",
            "grafana"} <= set(services)
    assert services["serving"]["build"] == {"context": ".", "dockerfile": "serving/Dockerfile"}


def test_the_service_reads_mlflow_as_the_user_the_one_shot_creates() -> None:
    """mlflow-users runs once MLflow is healthy and creates the service's user with the admin's
    credentials and the password of a compose secret; the service authenticates as that user (never
    the admin), reading the same secret's file, and starts only after the one-shot succeeded."""
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    services, secrets = document["services"], document["secrets"]
    users, serving = services["mlflow-users"], services["serving"]
    assert users["build"] == services["mlflow"]["build"]
    assert users["image"] == services["mlflow"]["image"]
    assert users["command"] == ["python", "/etc/mlflow/create_user.py"]
    assert (REPO_ROOT / "infra" / "docker" / "mlflow" / "create_user.py").is_file()
    assert "COPY create_user.py /etc/mlflow/create_user.py" in (
        REPO_ROOT / "infra" / "docker" / "mlflow" / "Dockerfile").read_text()
    assert users["depends_on"] == {"mlflow": {"condition": "service_healthy"}}
    assert users["restart"] == "no"
    assert "healthcheck" not in users
    secret = "mlflow_serving_password"
    assert secrets[secret] == {"environment": "MLFLOW_SERVING_PASSWORD"}
    assert secret in users["secrets"]
    assert secret in serving["secrets"]
    env = users["environment"]
    assert env["MLFLOW_TRACKING_USERNAME"].startswith("${MLFLOW_ADMIN_USER:?")
    assert env["MLFLOW_TRACKING_PASSWORD"].startswith("${MLFLOW_ADMIN_PASSWORD:?")
    assert env["MLFLOW_NEW_PASSWORD_FILE"] == f"/run/secrets/{secret}"
    serving_env = serving["environment"]
    assert serving_env["MLOPS_TRACKING_USERNAME"] == env["MLFLOW_NEW_USERNAME"]
    assert serving_env["MLOPS_TRACKING_USERNAME"].startswith("${MLFLOW_SERVING_USER:?")
    assert serving_env["MLOPS_TRACKING_PASSWORD_FILE"] == f"/run/secrets/{secret}"
    assert "MLOPS_TRACKING_PASSWORD" not in serving_env
    assert not any("MLFLOW_ADMIN" in str(value) for value in serving_env.values())
    assert serving["depends_on"]["mlflow-users"] == {"condition": "service_completed_successfully"}


def test_mlflows_auth_config_lets_a_user_without_grants_read() -> None:
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "infra" / "docker" / "mlflow" / "basic_auth.ini")
    assert config["mlflow"]["default_permission"] == "READ"
    assert not {"admin_password", "admin_username"} & set(config["mlflow"])
    assert config["mlflow"].getint("auth_cache_ttl_seconds") == 60  # a password hashed once a minute, not per request


def test_compose_scrape_config_mirrors_the_native_one_and_shares_the_alert_rules() -> None:
    native = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    compose = yaml.safe_load((PROMETHEUS_DIR / "prometheus-compose.yml").read_text())
    services = set(yaml.safe_load(COMPOSE_FILE.read_text())["services"])
    assert compose["rule_files"] == native["rule_files"] == ["alerts.yml"]
    assert compose["global"] == native["global"]
    native_jobs = {job["job_name"]: job for job in native["scrape_configs"]}
    for job in compose["scrape_configs"]:
        settings = {k: v for k, v in job.items() if k != "static_configs"}
        assert settings == {k: v for k, v in native_jobs[job["job_name"]].items() if k != "static_configs"}
        for target in job["static_configs"][0]["targets"]:
            assert target.split(":")[0] in services, target


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """The compose file, .env.example and what they mount or build, in a scratch directory."""
    for name in ("docker-compose.yml", ".env.example"):
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    for directory in ("monitoring/prometheus", "monitoring/grafana", "infra/docker/mlflow", "serving"):
        shutil.copytree(REPO_ROOT / directory, tmp_path / directory,
                        ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    return tmp_path


def _edit(path: Path, change: Callable[[Compose], None]) -> None:
    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


BREAKAGES: dict[str, tuple[Callable[[Compose], None], str]] = {
    "unknown key": (lambda d: d["services"]["redis"].update(helthcheck={}),
                    "schema: services.redis: 'helthcheck' does not match"),
    "missing mounted path": (lambda d: d["services"]["grafana"]["volumes"].append("./monitoring/nope:/x:ro"),
                             "grafana: mounted host path ./monitoring/nope does not exist"),
    "missing build context": (lambda d: d["services"]["mlflow"].update(build={"context": "infra/docker/gone"}),
                              "mlflow: build context"),
    "missing Dockerfile": (lambda d: d["services"]["serving"]["build"].update(dockerfile="serving/Nope"),
                           "serving: Dockerfile"),
    "unknown CLI command": (lambda d: d["services"]["serving"].update(command=["mlops", "serv"]),
                            "serving: `mlops serv`: the mlops CLI has no command 'serv'"),
    "missing module": (lambda d: d["services"]["serving"].update(command=["python", "-m", "serving.nope"]),
                       "no module serving.nope"),
    "latest tag": (lambda d: d["services"]["redis"].update(image="redis:latest"), "redis: image redis:latest"),
    "no health check": (lambda d: d["services"]["pushgateway"].pop("healthcheck"),
                        "pushgateway: a long-running service needs a healthcheck"),
    "depends on start only": (lambda d: d["services"]["grafana"].update(
        depends_on={"prometheus": {"condition": "service_started"}}), "condition service_started"),
    "literal password": (lambda d: d["services"]["postgres"]["environment"].update(POSTGRES_PASSWORD="hunter2"),
                         "postgres: POSTGRES_PASSWORD must be a ${VARIABLE}"),
    "password file not the service's secret": (lambda d: d["services"]["mlflow-users"].pop("secrets"),
                                               "mlflow-users: MLFLOW_NEW_PASSWORD_FILE must be"),
    "default password": (lambda d: d["services"]["grafana"]["environment"].update(
        GF_SECURITY_ADMIN_PASSWORD="${GRAFANA_ADMIN_PASSWORD:-admin}"), "has a default (:-admin)"),
}


@pytest.mark.parametrize("case", BREAKAGES)
def test_a_broken_compose_file_fails_for_the_right_reason(repo_copy: Path, case: str) -> None:
    change, expected = BREAKAGES[case]
    compose = repo_copy / "docker-compose.yml"
    assert check(compose) == []  # the copy is sound before the change
    _edit(compose, change)
    problems = check(compose)
    assert any(expected in problem for problem in problems), problems


def test_a_variable_missing_from_env_example_is_named(repo_copy: Path) -> None:
    env = repo_copy / ".env.example"
    env.write_text("".join(line + "\n" for line in env.read_text().splitlines() if "REDIS_PASSWORD" not in line))
    assert check(repo_copy / "docker-compose.yml") == ["variable REDIS_PASSWORD is not listed in .env.example"]


def test_the_check_exits_0_when_valid_1_when_invalid_2_when_missing(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compose = repo_copy / "docker-compose.yml"
    assert main([str(compose)]) == 0
    _edit(compose, lambda d: d["services"]["redis"].update(helthcheck={}))
    assert main([str(compose)]) == 1
    assert "helthcheck" in capsys.readouterr().out
    assert main([str(repo_copy / "missing.yml")]) == 2
    assert "does not exist" in capsys.readouterr().err
