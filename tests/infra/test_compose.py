"""docker-compose.yml validates against the Compose schema and names only
what exists here; each deliberate breakage of a copy is caught for the right reason."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.compose import COMPOSE_FILE, check, main
from infra.manifests import REPO_ROOT

Compose = dict[str, Any]
PROMETHEUS_DIR = REPO_ROOT / "monitoring" / "prometheus"


def test_the_committed_compose_file_is_sound() -> None:
    assert check() == []
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert {"postgres", "minio", "minio-init", "mlflow", "redis", "serving", "pushgateway", "prometheus",
            "grafana"} <= set(services)
    assert services["serving"]["build"] == {"context": ".", "dockerfile": "serving/Dockerfile"}


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
