"""The stack's passwords without starting a server (fast): generated once into 0600 files, found by
the clients through the profile, put into Redis' URL and MLflow's variables, never guessed; the
service the stack starts is pointed at the read-only `serving` user, never the admin."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from mlops.errors import ConfigError, StackError
from mlops.registry_client import connect
from mlops.settings import Settings
from native_stack import credentials, supervisor
from native_stack.settings import StackSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def stack_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("MLOPS_TRACKING_URI", "MLOPS_ONLINE_STORE", "MLOPS_REDIS_URL", "MLOPS_TRACKING_USERNAME",
                 "MLOPS_TRACKING_PASSWORD", "MLOPS_TRACKING_PASSWORD_FILE", "MLOPS_REDIS_PASSWORD_FILE",
                 "MLOPS_SETTINGS_JSON", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.setenv(name, "")  # recorded, so what connect() writes is undone after the test
        monkeypatch.delenv(name)
    monkeypatch.setenv("MLOPS_PROFILE", "stack")
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    return monkeypatch


def test_the_stack_makes_its_passwords_once_and_the_clients_find_them(stack_env: pytest.MonkeyPatch) -> None:
    settings = StackSettings()
    with pytest.raises(ConfigError, match=r"MLOPS_TRACKING_PASSWORD_FILE: cannot read .*make stack"):
        _ = settings.tracking_credentials  # before the stack ever started: one clear line, no guess
    root = settings.resolved_home / "stack"
    ini = credentials.mlflow_auth_config(settings, root)
    conf = credentials.redis_config(settings, root, 6379)
    admin = root / "mlflow" / "admin.password"
    redis_password = (root / "redis" / "redis.password").read_text()
    for path in (ini, conf, admin, root / "redis" / "redis.password"):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert settings.tracking_credentials == ("admin", admin.read_text())
    assert f"admin_password = {admin.read_text()}" in ini.read_text()
    assert "default_permission = READ" in ini.read_text()  # a user without a grant reads (the service)
    assert "auth_cache_ttl_seconds = 60" in ini.read_text()  # a password hashed once a minute, not per request
    assert f'requirepass "{redis_password}"' in conf.read_text()
    assert settings.resolved_redis_url == f"redis://:{redis_password}@127.0.0.1:6379/0"
    # Made once: a restart keeps both.
    credentials.mlflow_auth_config(settings, root)
    credentials.redis_config(settings, root, 6379)
    assert (admin.read_text(), (root / "redis" / "redis.password").read_text()) == (
        settings.tracking_credentials[1], redis_password)  # type: ignore[index]
    # The service the stack starts is told where they are, not what they are, and reads as `serving`.
    serving = root / "mlflow" / "serving.password"
    env = credentials.service_env(settings, root)
    assert env == {"MLOPS_TRACKING_USERNAME": "serving", "MLOPS_TRACKING_PASSWORD_FILE": str(serving),
                   "MLOPS_REDIS_PASSWORD_FILE": str(root / "redis" / "redis.password")}
    # create_user.py (run by the supervisor once MLflow answers) gets the admin's and serving's files.
    made = credentials.create_user_env(settings, root)
    assert made == {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD_FILE": str(admin),
                    "MLFLOW_NEW_USERNAME": "serving", "MLFLOW_NEW_PASSWORD_FILE": str(serving)}
    assert serving.stat().st_mode & 0o777 == 0o600
    assert serving.read_text() not in (admin.read_text(), redis_password)
    assert credentials.create_user_env(settings, root) == made
    with pytest.MonkeyPatch.context() as service:  # the service's settings, read from that environment
        for name, value in env.items():
            service.setenv(name, value)
        assert Settings().tracking_credentials == ("serving", serving.read_text())
    # The platform's MLflow client sends them (MLflow's own variables, this process only).
    connect(settings.model_copy(update={"tracking_uri": "http://127.0.0.1:1"}))
    assert (os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]) == (
        "admin", admin.read_text())


def test_a_lost_admin_password_beside_mlflows_users_stops_the_start(stack_env: pytest.MonkeyPatch) -> None:
    settings = StackSettings()
    root = settings.resolved_home / "stack"
    credentials.auth_database(root).parent.mkdir(parents=True)
    credentials.auth_database(root).touch()
    with pytest.raises(StackError, match="admin's password\\) is gone"):
        credentials.mlflow_auth_config(settings, root)


def test_passwords_given_in_the_environment_win_and_are_never_written(stack_env: pytest.MonkeyPatch) -> None:
    stack_env.setenv("MLOPS_TRACKING_PASSWORD", "given-pw")
    stack_env.setenv("MLOPS_REDIS_URL", "redis://:given%2Fredis@127.0.0.1:6379/0")
    settings = StackSettings()
    root = settings.resolved_home / "stack"
    credentials.mlflow_auth_config(settings, root)
    conf = credentials.redis_config(settings, root, 6379)
    assert settings.tracking_credentials == ("admin", "given-pw")
    assert 'requirepass "given/redis"' in conf.read_text()
    assert not (root / "mlflow" / "admin.password").exists()
    assert not (root / "redis" / "redis.password").exists()
    serving = root / "mlflow" / "serving.password"
    assert credentials.service_env(settings, root) == {"MLOPS_TRACKING_USERNAME": "serving",
                                                        "MLOPS_TRACKING_PASSWORD_FILE": str(serving)}
    # The given admin password reaches create_user.py (one short-lived process) as a value, never a file.
    assert credentials.create_user_env(settings, root)["MLFLOW_TRACKING_PASSWORD"] == "given-pw"
    assert not (root / "mlflow" / "admin.password").exists()


def test_an_admin_named_like_the_service_user_is_refused(stack_env: pytest.MonkeyPatch) -> None:
    stack_env.setenv("MLOPS_TRACKING_USERNAME", "serving")
    settings = StackSettings()
    with pytest.raises(StackError, match="service's read-only user"):
        credentials.create_user_env(settings, settings.resolved_home / "stack")


def test_a_user_without_a_password_is_refused_by_name(stack_env: pytest.MonkeyPatch) -> None:
    stack_env.delenv("MLOPS_PROFILE")
    stack_env.setenv("MLOPS_TRACKING_USERNAME", "alice")
    with pytest.raises(ConfigError, match="MLOPS_TRACKING_USERNAME is set without"):
        _ = Settings().tracking_credentials
    stack_env.delenv("MLOPS_TRACKING_USERNAME")
    assert Settings().tracking_credentials is None


def test_a_registry_that_accepts_and_never_answers_stops_the_user_step_in_one_line(
        stack_env: pytest.MonkeyPatch) -> None:
    """A listening socket nobody serves: the kernel accepts, no byte comes back. The user step gives
    up after its limit with a StackError naming the server (no password), not a TimeoutExpired traceback."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        uri = f"http://admin:s3cret@127.0.0.1:{silent.getsockname()[1]}"
        stack_env.setenv("MLOPS_TRACKING_URI", uri)
        stack = supervisor.Stack(StackSettings())
        started = time.monotonic()
        with pytest.raises(StackError) as stopped:
            supervisor.ensure_serving_user(stack, timeout_s=3)
        waited = time.monotonic() - started
    message = str(stopped.value)
    assert "took over 3 s" in message
    assert f"127.0.0.1:{uri.rsplit(':', 1)[1]} accepts connections but does not answer" in message
    assert "s3cret" not in message
    assert "\n" not in message
    assert waited < 30  # the limit, not create_user.py's own two minutes of waiting
