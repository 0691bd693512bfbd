"""The stack's generated secrets and the servers' config files that carry them, never a command line.

The MLflow admin's, the read-only ``serving`` user's and Redis' passwords are made once
(``secrets.token_urlsafe``) and kept in 0600 files under the stack's folder, where the clients'
settings read them (profiles/stack.env: MLOPS_TRACKING_PASSWORD_FILE, MLOPS_REDIS_PASSWORD_FILE;
the prediction service the stack starts is pointed at ``serving``'s file instead of the admin's).
The MLflow server reads its admin from the basic-auth app's config file (MLFLOW_AUTH_CONFIG_PATH,
0600), where every user without a grant may read (``default_permission = READ``, as compose's);
redis-server reads ``requirepass`` from its config file (0600). A password set in the environment
instead (MLOPS_TRACKING_PASSWORD, or one inside MLOPS_REDIS_URL) is used as it is and never written.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mlops.errors import StackError
from native_stack.settings import StackSettings

DEFAULT_ADMIN = "admin"
# The prediction service's MLflow user: no grant, so it may read (default_permission) and never write.
SERVING_USER = "serving"
# Variables of the supervisor's own environment that may hold the admin's password: never handed on to
# a server or the service (each gets what it needs by name and file).
INHERITED_SECRETS = ("MLOPS_TRACKING_PASSWORD", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


def write_private(path: Path, text: str) -> None:
    """``text`` in ``path``, readable by its owner only from the first byte (written beside, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(text)
    partial.replace(path)


def generated(path: Path) -> str:
    """The password kept in ``path``; made on first use."""
    if not path.is_file():
        write_private(path, secrets.token_urlsafe(24))
    path.chmod(0o600)
    return path.read_text().strip()


def _under_home(settings: StackSettings, path: Path | None, default: str) -> Path:
    chosen = path if path is not None else Path(default)
    return chosen if chosen.is_absolute() else settings.resolved_home / chosen


def tracking_password_path(settings: StackSettings) -> Path:
    return _under_home(settings, settings.tracking_password_file, "stack/mlflow/admin.password")


def redis_password_path(settings: StackSettings) -> Path:
    return _under_home(settings, settings.redis_password_file, "stack/redis/redis.password")


def _redis_url_password(settings: StackSettings) -> str | None:
    given = urlsplit(settings.redis_url.get_secret_value() if settings.redis_url else "").password
    return unquote(given) if given else None


def serving_password_path(root: Path) -> Path:
    return root / "mlflow" / "serving.password"


def service_env(settings: StackSettings, root: Path) -> dict[str, str]:
    """What the prediction service the stack starts needs to find its passwords: names and paths, no secret.

    It reads the registry as ``serving`` (read-only), never as the admin the pipeline and the jobs use.
    """
    env = {"MLOPS_TRACKING_USERNAME": SERVING_USER, "MLOPS_TRACKING_PASSWORD_FILE": str(serving_password_path(root))}
    if _redis_url_password(settings) is None:
        env["MLOPS_REDIS_PASSWORD_FILE"] = str(redis_password_path(settings))
    return env


def create_user_env(settings: StackSettings, root: Path) -> dict[str, str]:
    """The variables of infra/docker/mlflow/create_user.py that make ``serving`` (its password made on first use).

    The admin's password goes as its file; only one given in the environment (MLOPS_TRACKING_PASSWORD,
    never written) goes as a value, to that one short-lived process.
    """
    admin, password = mlflow_admin(settings, root)
    if admin == SERVING_USER:
        raise StackError(f"MLOPS_TRACKING_USERNAME={admin}: that name is the service's read-only user; "
                         "the admin needs another")
    generated(serving_password_path(root))
    env = {"MLFLOW_TRACKING_USERNAME": admin, "MLFLOW_NEW_USERNAME": SERVING_USER,
           "MLFLOW_NEW_PASSWORD_FILE": str(serving_password_path(root))}
    if settings.tracking_password is None:
        env["MLFLOW_TRACKING_PASSWORD_FILE"] = str(tracking_password_path(settings))
    else:
        env["MLFLOW_TRACKING_PASSWORD"] = password
    return env


def mlflow_admin(settings: StackSettings, root: Path) -> tuple[str, str]:
    """(user, password) of the MLflow server's admin: the settings' user, the password they name or a new one.

    MLflow's auth app creates its admin only in an empty user store and ignores the password after
    that, so a new password beside an existing store would lock every client out: refused.
    """
    user = settings.tracking_username or DEFAULT_ADMIN
    if settings.tracking_password is not None:
        return user, settings.tracking_password.get_secret_value()
    path = tracking_password_path(settings)
    if not path.is_file() and auth_database(root).exists():
        raise StackError(f"{auth_database(root)} holds MLflow's users but {path} (the admin's password) is gone: "
                         f"restore it, or delete {auth_database(root)} to make a new admin")
    return user, generated(path)


def auth_database(root: Path) -> Path:
    return root / "mlflow" / "basic_auth.db"


def mlflow_auth_config(settings: StackSettings, root: Path) -> Path:
    """The basic-auth app's config (0600): users in SQLite under the stack, any user may read (as compose's)."""
    user, password = mlflow_admin(settings, root)
    path = root / "mlflow" / "basic_auth.ini"
    write_private(path, "\n".join([
        "[mlflow]",
        "default_permission = READ",
        f"database_uri = sqlite:///{auth_database(root)}",
        f"admin_username = {user}",
        f"admin_password = {password.replace('%', '%%')}",  # configparser interpolates %
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth",
        # Each password check is a deliberately slow hash (PBKDF2): about half a second of the server's
        # CPU on every request without this cache (MLflow's own knob, off by default).
        "auth_cache_ttl_seconds = 60",
        "",
    ]))
    return path


def redis_password(settings: StackSettings) -> str:
    """The password inside MLOPS_REDIS_URL, else the one in the file the settings name (made on first use)."""
    return _redis_url_password(settings) or generated(redis_password_path(settings))


def redis_config(settings: StackSettings, root: Path, port: int) -> Path:
    """redis-server's config (0600): loopback, this port, append-only under the stack, a password."""
    folder = root / "redis"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "redis.conf"
    write_private(path, "\n".join([
        "bind 127.0.0.1",
        f"port {port}",
        f'dir "{folder}"',
        "appendonly yes",
        'save ""',
        "daemonize no",
        f'requirepass "{_quoted(redis_password(settings))}"',
        "",
    ]))
    return path


def _quoted(value: str) -> str:
    """``value`` inside a redis.conf double-quoted string."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
