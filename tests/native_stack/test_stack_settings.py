"""The stack's settings and process bookkeeping, without starting the servers (fast).

The profile file under the environment, the Redis settings and Feast's connection string, the
Prometheus configuration the stack writes, and stopping only what was recorded.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from feature_repo.config import redis_connection_string
from feature_repo.store import open_store
from mlops.errors import StackError
from mlops.settings import Settings
from native_stack import processes as procs
from native_stack.config import prometheus_config
from native_stack.settings import StackSettings
from native_stack.supervisor import Stack, down, up


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("MLOPS_PROFILE", "MLOPS_TRACKING_URI", "MLOPS_ONLINE_STORE", "MLOPS_REDIS_URL", "MLOPS_PORT",
                 "MLOPS_PUSHGATEWAY_URL", "MLOPS_STACK_POSTGRES_PORT", "MLOPS_STACK_PROMETHEUS_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    return monkeypatch


@pytest.mark.unit
def test_profile_fills_what_the_environment_leaves_unset(clean_env: pytest.MonkeyPatch) -> None:
    assert Settings().online_store == "sqlite"
    clean_env.setenv("MLOPS_PROFILE", "stack")
    clean_env.setenv("MLOPS_PORT", "18123")
    settings = StackSettings()
    assert settings.resolved_tracking_uri == "http://127.0.0.1:5000"
    assert settings.online_store == "redis"
    assert settings.redis_url is not None
    assert settings.redis_url.get_secret_value() == "redis://127.0.0.1:6379/0"
    assert settings.tracking_http_retries == 2
    assert settings.port == 18123  # the environment wins over the profile's 8000
    assert Stack(settings).ports == {"postgres": 5432, "mlflow": 5000, "redis": 6379, "pushgateway": 9091,
                                     "serving": 18123, "prometheus": 9090}


@pytest.mark.unit
@pytest.mark.parametrize(("env", "message"), [
    ({"MLOPS_PROFILE": "nope"}, "unknown profile 'nope'; known: stack"),
    ({"MLOPS_ONLINE_STORE": "redis"}, "MLOPS_ONLINE_STORE=redis needs MLOPS_REDIS_URL"),
    ({"MLOPS_REDIS_URL": "http://127.0.0.1:6379"}, "must look like redis://"),
    ({"MLOPS_REDIS_URL": "redis://:a,b@127.0.0.1:6379/0"}, "a password with a comma"),
])
def test_bad_store_settings_are_refused_by_name(clean_env: pytest.MonkeyPatch, env: dict[str, str],
                                                message: str) -> None:
    for key, value in env.items():
        clean_env.setenv(key, value)
    with pytest.raises(ValidationError, match=message):
        Settings()


@pytest.mark.integration
def test_cli_reports_a_bad_profile_in_one_line_with_exit_code_2(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MLOPS_PROFILE", "nope")
    result = subprocess.run([sys.executable, "-m", "native_stack", "status"], capture_output=True, text=True,
                            check=False, timeout=120)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "unknown profile 'nope'" in result.stderr


@pytest.mark.unit
@pytest.mark.parametrize(("url", "expected"), [
    ("redis://127.0.0.1:6380/2", "127.0.0.1:6380,db=2"),
    ("redis://localhost", "localhost:6379,db=0"),
    ("redis://:p%40ss@redis:6379/0", "redis:6379,db=0,password=p@ss"),
    ("rediss://user:pw@cache.example:6390/1", "cache.example:6390,db=1,username=user,password=pw,ssl=true"),
])
def test_redis_url_becomes_feasts_connection_string(url: str, expected: str) -> None:
    assert redis_connection_string(url) == expected


@pytest.mark.unit
def test_feast_online_store_follows_the_setting(clean_env: pytest.MonkeyPatch) -> None:
    assert open_store(Settings()).config.online_store.type == "sqlite"
    clean_env.setenv("MLOPS_ONLINE_STORE", "redis")
    clean_env.setenv("MLOPS_REDIS_URL", "redis://:secret@127.0.0.1:6390/3")
    online = open_store(Settings()).config.online_store
    assert (online.type, online.connection_string) == ("redis", "127.0.0.1:6390,db=3,password=secret")


@pytest.mark.unit
def test_prometheus_config_scrapes_the_stacks_ports(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MLOPS_PROFILE", "stack")
    settings = StackSettings(stack_scrape_interval_s=1)
    config = yaml.safe_load(prometheus_config(settings, {**Stack(settings).ports, "serving": 18001}))
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in config["scrape_configs"]}
    assert targets == {"prediction-service": ["127.0.0.1:18001"], "pushgateway": ["127.0.0.1:9091"]}
    assert all(Path(rules).is_file() for rules in config["rule_files"])


@pytest.mark.integration
def test_a_taken_port_stops_the_start_naming_the_service(clean_env: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        clean_env.setenv("MLOPS_PROFILE", "stack")
        clean_env.setenv("MLOPS_STACK_POSTGRES_PORT", str(taken.getsockname()[1]))
        settings = StackSettings()
        with pytest.raises(StackError, match=rf"postgres: port {taken.getsockname()[1]} on 127.0.0.1 is in use"):
            up(settings)
    assert not Stack(settings).records_path.exists()


@pytest.mark.integration
def test_down_stops_recorded_processes_and_never_a_reused_pid(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("MLOPS_PROFILE", "stack")
    settings = StackSettings()
    stack = Stack(settings)
    sleeper = procs.start("redis", ["sleep", "300"], tmp_path / "sleep.log")
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        # A record whose pid now belongs to another process (other start time) is left alone.
        reused = procs.ProcessRecord(name="mlflow", pid=stranger.pid, started_ticks=1, log=tmp_path / "x.log")
        procs.write_records(stack.records_path, {"redis": sleeper, "mlflow": reused})
        assert down(settings) == ["redis"]
        assert not procs.is_running(sleeper)
        assert stranger.poll() is None
        assert not stack.records_path.exists()
    finally:
        stranger.send_signal(signal.SIGTERM)
        stranger.wait(timeout=10)


@pytest.mark.unit
def test_a_tracking_server_gone_mid_run_is_one_line_and_exit_code_1(clean_env: pytest.MonkeyPatch) -> None:
    from pipelines.orchestration.runner import _failure

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, never listening: refuses connections
        settings = Settings(tracking_uri=uri, tracking_http_retries=0)
        failure = _failure(settings, "some-run", RuntimeError("task 'validate' failed"), "validate")
    assert failure.message == (f"pipeline stopped at validate: cannot reach the MLflow tracking server at {uri}: "
                               "connection refused; nothing was promoted")
    assert "\n" not in failure.message
    assert failure.exit_code == 1  # an outage, not bad input, though validate is a bad-input step
