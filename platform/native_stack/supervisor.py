"""The production-shaped stack on one host, without Docker (`make stack` / `make stack-down`).

PostgreSQL (Debian's) as MLflow's backend store, the MLflow tracking server on it (artifacts
served from a local folder, MLflow's basic-auth app), redis-server as Feast's online store (with a
password), the Pushgateway, the prediction service and Prometheus scraping both: all on 127.0.0.1,
the servers' state under
``$MLOPS_HOME/stack``, where ``MLOPS_HOME`` is the stack's own home (the profile's ``.mlops-stack``),
never the embedded home that `make demo` builds.
Ports come from the settings (the ``stack`` profile's fixed ones, or the environment), so the
platform's own clients and the stack always agree. The ids of the started processes are recorded
in ``stack/processes.json``; ``down`` stops exactly those.

Who may do what in MLflow: the admin (profiles/stack.env's user, password generated into
``stack/mlflow/admin.password``) is what the pipeline and the jobs a person runs use; the prediction
service reads the registry as ``serving``, a user without a grant (the auth config's
``default_permission = READ``), whose password is generated into ``stack/mlflow/serving.password``.
Once MLflow answers, the supervisor creates that user, or sets its password to the file's, as
the admin through MLflow's REST API (infra/docker/mlflow/create_user.py, the script compose and
Kubernetes run), and only then starts the service. See credentials.py for where each secret lives.

    python -m native_stack up | down | status
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from mlops.errors import StackError
from mlops.log_owner import registry_identity
from native_stack import credentials
from native_stack import processes as procs
from native_stack.config import REPO_ROOT, prometheus_config, server_binary
from native_stack.settings import StackSettings

ORDER = ("postgres", "mlflow", "redis", "pushgateway", "serving", "prometheus")
READY_TIMEOUT_S = {"postgres": 60.0, "mlflow": 120.0, "redis": 30.0, "pushgateway": 30.0, "serving": 120.0,
                   "prometheus": 60.0}
PG_SUPERUSER = "postgres"  # the OS account Debian's packages create; postgres refuses to run as root
DATABASE = "mlflow"
# Compose's one-shot mlflow-users and the Job mlflow-serving-user run this very file (standard library
# only, copied into the MLflow image); infra and native_stack never import each other, so it runs as one.
CREATE_USER = REPO_ROOT / "infra" / "docker" / "mlflow" / "create_user.py"


@dataclass(frozen=True)
class Stack:
    """Where everything of one stack lives and listens, derived from the settings."""

    settings: StackSettings

    @property
    def root(self) -> Path:
        return self.settings.resolved_home / "stack"

    @property
    def records_path(self) -> Path:
        return self.root / "processes.json"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    @property
    def ports(self) -> dict[str, int]:
        s = self.settings
        return {"postgres": s.stack_postgres_port, "mlflow": _port(s.resolved_tracking_uri, "MLOPS_TRACKING_URI"),
                "redis": _port(s.redis_url.get_secret_value() if s.redis_url else "", "MLOPS_REDIS_URL"),
                "pushgateway": _port(s.pushgateway_url or "", "MLOPS_PUSHGATEWAY_URL"), "serving": s.port,
                "prometheus": s.stack_prometheus_port}

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.stack_prometheus_port}"

    def records(self) -> dict[str, procs.ProcessRecord]:
        return procs.read_records(self.records_path)


def _port(url: str, variable: str) -> int:
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
        raise StackError(f"{variable}={url or '(unset)'}: the stack needs a loopback URL with a port "
                         "(MLOPS_PROFILE=stack sets one)")
    return parts.port


def _running_user_for_postgres() -> str | None:
    """Postgres refuses root: as root it runs as the `postgres` account, otherwise as the caller."""
    return PG_SUPERUSER if os.geteuid() == 0 else None


def _hand_over(path: Path, user: str | None) -> None:
    """A folder the postgres account owns, with every parent searchable by it."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    if user is None:
        return
    import pwd

    account = pwd.getpwnam(user)
    os.chown(path, account.pw_uid, account.pw_gid)
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & 0o001 and parent.stat().st_uid != account.pw_uid:
            raise StackError(f"the {user} account cannot reach {path}: {parent} is not searchable by others "
                             f"(chmod o+x {parent}, or set MLOPS_HOME elsewhere)")


def _postgres(stack: Stack) -> tuple[procs.ProcessRecord, Callable[[], bool]]:
    """Initialise on first use, start, wait, and make sure MLflow's role and database exist."""
    user, port = _running_user_for_postgres(), stack.ports["postgres"]
    data, sockets = stack.root / "postgres" / "data", stack.root / "postgres" / "run"
    for folder in (data.parent, sockets):
        _hand_over(folder, user)
    if not (data / "PG_VERSION").exists():
        _hand_over(data, user)
        init = subprocess.run([server_binary("initdb"), "-D", str(data), "-U", PG_SUPERUSER, "--encoding=UTF8",
                               "--auth-local=trust", "--auth-host=scram-sha-256"],
                              capture_output=True, text=True, user=user, check=False)
        if init.returncode != 0:
            raise StackError(f"postgres: initdb failed for {data}: {' '.join(init.stderr.split())[-300:]}")
    # The socket folder is the server account's alone (0700), so "trust" on it admits only that account.
    record = procs.start("postgres", [server_binary("postgres"), "-D", str(data), "-p", str(port),
                                      "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={sockets}"],
                         stack.log("postgres"), env=_service_env(stack), user=user,
                         stop_signal=signal.SIGINT)  # SIGINT: fast shutdown
    try:
        procs.wait_until(record, lambda: _psql(stack, "SELECT 1", check=False).returncode == 0,
                         READY_TIMEOUT_S["postgres"])
        if not _password_file(stack).exists():
            _create_database(stack)
    except BaseException:
        procs.stop(record)
        raise
    return record, lambda: True


def _create_database(stack: Stack) -> None:
    """MLflow's role (a fresh password, kept 0600 in the stack folder) and database; safe to repeat."""
    password = secrets.token_urlsafe(24)
    _psql(stack, f"""
        SELECT format('CREATE ROLE {DATABASE} LOGIN PASSWORD %L', '{password}')
            WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{DATABASE}') \\gexec
        ALTER ROLE {DATABASE} PASSWORD '{password}';
        SELECT 'CREATE DATABASE {DATABASE} OWNER {DATABASE}'
            WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '{DATABASE}') \\gexec
    """)
    path = _password_file(stack)
    path.touch(mode=0o600)
    path.write_text(password)


def _password_file(stack: Stack) -> Path:
    return stack.root / "postgres" / "mlflow.password"


def _psql(stack: Stack, sql: str, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """SQL as the superuser over the private socket; the statements go through stdin, not argv."""
    result = subprocess.run([server_binary("psql"), "-h", str(stack.root / "postgres" / "run"), "-p",
                             str(stack.ports["postgres"]), "-U", PG_SUPERUSER, "-d", "postgres", "-v",
                             "ON_ERROR_STOP=1", "-X", "-q", "-f", "-"], input=sql, capture_output=True, text=True,
                            user=_running_user_for_postgres(), check=False)
    if check and result.returncode != 0:
        raise StackError(f"postgres: psql failed: {result.stderr.strip()}")
    return result


def backend_store_uri(stack: Stack) -> str:
    password = _password_file(stack).read_text().strip()
    # SQLAlchemy 2.1 reads a bare postgresql:// as psycopg 3; the driver installed is psycopg2.
    return f"postgresql+psycopg2://{DATABASE}:{password}@127.0.0.1:{stack.ports['postgres']}/{DATABASE}"


def _service_env(stack: Stack, **extra: str) -> dict[str, str]:
    """Each started process' environment: this one's less any admin password, the venv's bin, the home, ``extra``."""
    bin_dir = str(Path(sys.executable).parent)
    inherited = {k: v for k, v in os.environ.items() if k not in credentials.INHERITED_SECRETS}
    return {**inherited, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "MLOPS_HOME": str(stack.settings.resolved_home), **extra}


def ensure_serving_user(stack: Stack, *, timeout_s: float = READY_TIMEOUT_S["mlflow"] + 60) -> str:
    """Make sure the service's read-only MLflow user signs in with its file's password; returns what was done.

    'unchanged' (it does: nothing written), 'created' or 'updated' (its password set to the file's).

    As the admin, through MLflow's REST API, by running CREATE_USER in a clean environment (admin's
    password as its file, no password in argv); it waits for MLflow's /health itself.
    """
    env = {"PATH": os.environ.get("PATH", ""), "MLFLOW_TRACKING_URI": stack.settings.resolved_tracking_uri,
           "MLFLOW_WAIT_S": f"{READY_TIMEOUT_S['mlflow']:g}", **credentials.create_user_env(stack.settings, stack.root)}
    try:
        done = subprocess.run([sys.executable, "-I", str(CREATE_USER)], env=env, capture_output=True, text=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:  # the child is killed; a server that accepts and never answers
        raise StackError(f"mlflow: making the service's user {credentials.SERVING_USER!r} took over {timeout_s:.0f} s: "
                         f"{registry_identity(stack.settings.resolved_tracking_uri)} accepts connections but does not "
                         "answer; "
                         f"see {stack.log('mlflow')}") from exc
    if done.returncode != 0:
        raise StackError(f"mlflow: the service's user {credentials.SERVING_USER!r} could not be made: "
                         f"{' '.join((done.stderr or done.stdout).split())[-300:]}")
    return done.stdout.split()[-1]  # "create_user: serving created" (or updated, unchanged)


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def start_service(stack: Stack, name: str) -> procs.ProcessRecord:
    """Start one service of the stack and wait until it is ready; returns its record (not yet saved).

    The prediction service's MLflow user is made (or re-passworded) first: MLflow must be running.
    """
    if name == "serving":
        ensure_serving_user(stack)
    record, ready = _launch(stack, name)
    procs.wait_until(record, ready, READY_TIMEOUT_S[name])
    return record


def _launch(stack: Stack, name: str) -> tuple[procs.ProcessRecord, Callable[[], bool]]:
    """Start one service without waiting; returns its record and its readiness check."""
    port = stack.ports[name]
    if not procs.port_free(port):
        raise StackError(f"{name}: port {port} on 127.0.0.1 is in use (another stack, or change its setting)")
    if name == "postgres":
        return _postgres(stack)
    root, url = stack.root, f"http://127.0.0.1:{port}"
    if name == "mlflow":
        # Passwords reach the server through its environment and the auth app's 0600 config file,
        # never a command line. The basic-auth app answers 401 without a user's password. Server-side
        # jobs (GenAI features) are not used: no job runner process.
        env = _service_env(stack, MLFLOW_BACKEND_STORE_URI=backend_store_uri(stack),
                           MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
                           MLFLOW_AUTH_CONFIG_PATH=str(credentials.mlflow_auth_config(stack.settings, root)),
                           MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_urlsafe(32))
        record = procs.start(name, [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1",
                                    "--port", str(port), "--workers", "1", "--app-name", "basic-auth",
                                    "--serve-artifacts", "--artifacts-destination", str(root / "mlflow" / "artifacts")],
                             stack.log(name), env=env)
        check = f"{url}/health"
    elif name == "redis":
        # requirepass from its 0600 config file, never a command line.
        config = credentials.redis_config(stack.settings, root, port)
        record = procs.start(name, [server_binary("redis-server"), str(config)], stack.log(name),
                             env=_service_env(stack))
        return record, lambda: procs.accepts(port)
    elif name == "pushgateway":
        (root / "pushgateway").mkdir(parents=True, exist_ok=True)
        record = procs.start(name, [server_binary("prometheus-pushgateway"),
                                    f"--web.listen-address=127.0.0.1:{port}",
                                    f"--persistence.file={root / 'pushgateway' / 'metrics.data'}"], stack.log(name),
                             env=_service_env(stack))
        check = f"{url}/-/ready"
    elif name == "serving":
        # As `serving` (read-only; ensure_serving_user made it): the admin's password is not in its environment.
        record = procs.start(name, [sys.executable, "-m", "mlops_cli", "serve"], stack.log(name),
                             env=_service_env(stack, **credentials.service_env(stack.settings, root)))
        check = f"{url}/v2/health/live"  # ready only once a pipeline run has promoted a model
    else:
        config = root / "prometheus" / "prometheus.yml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(prometheus_config(stack.settings, stack.ports))
        record = procs.start(name, [server_binary("prometheus"), f"--config.file={config}",
                                    f"--storage.tsdb.path={root / 'prometheus' / 'data'}",
                                    f"--web.listen-address=127.0.0.1:{port}"], stack.log(name), env=_service_env(stack))
        check = f"{url}/-/ready"
    return record, lambda: _http_ok(check)


def up(settings: StackSettings, *, echo: bool = False) -> dict[str, procs.ProcessRecord]:
    """Start every service; on any failure stop what was started and raise.

    Postgres first (MLflow needs it at start); MLflow, Redis, the Pushgateway and Prometheus start
    together and are waited for in that order. Only the prediction service waits for MLflow: once
    MLflow answers, its read-only user is made (ensure_serving_user) and the service starts; it
    serves nothing until a model is promoted anyway, and polls its alias.
    """
    stack = Stack(settings)
    running = {n: r for n, r in stack.records().items() if procs.is_running(r)}
    if running:
        raise StackError(f"the stack under {stack.root} is already running ({', '.join(running)}); "
                         "stop it first (make stack-down)")
    started = time.monotonic()
    records: dict[str, procs.ProcessRecord] = {}

    def launch(name: str) -> tuple[procs.ProcessRecord, Callable[[], bool]]:
        launched = _launch(stack, name)
        records[name] = launched[0]
        procs.write_records(stack.records_path, records)
        return launched

    def ready(record: procs.ProcessRecord, what: str = "ready") -> None:
        if echo:
            print(f"{record.name:<12} pid {record.pid:<8} 127.0.0.1:{stack.ports[record.name]:<6} {what} after "
                  f"{time.monotonic() - started:5.1f} s  log {record.log}", flush=True)

    try:
        procs.wait_until(*launch("postgres"), READY_TIMEOUT_S["postgres"])
        ready(records["postgres"])
        pending = [launch(name) for name in ORDER[1:] if name != "serving"]
        while pending:
            record, check = pending.pop(0)
            procs.wait_until(record, check, READY_TIMEOUT_S[record.name])
            ready(record)
            if record.name == "mlflow":
                ready(record, f"user {credentials.SERVING_USER} {ensure_serving_user(stack)}")
                pending.append(launch("serving"))
    except BaseException:
        procs.write_records(stack.records_path, records)
        down(settings)
        raise
    return records


def down(settings: StackSettings, *, echo: bool = False) -> list[str]:
    """Stop the recorded processes, last started first; returns the names of those that were running."""
    stack = Stack(settings)
    records = stack.records()
    stopped = [name for name in reversed(ORDER) if name in records and procs.stop(records[name])]
    if echo:
        for name in stopped:
            print(f"stopped {name} (pid {records[name].pid})")
        print(f"state kept in {stack.root}; `rm -rf {stack.root}` wipes it")
    stack.records_path.unlink(missing_ok=True)
    return stopped


def status(settings: StackSettings) -> dict[str, bool]:
    return {name: procs.is_running(record) for name, record in Stack(settings).records().items()}
