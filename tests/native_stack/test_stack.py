"""The native production-shaped stack (platform/native_stack), brought up for real on private ports.

One stack for the module: PostgreSQL under MLflow's tracking server, Redis as Feast's online store,
the Pushgateway, the prediction service and Prometheus (1 s scrapes). The pipeline's steps run
against it through settings alone (MLOPS_PROFILE=stack plus these ports), the service follows the
promoted version and answers traffic, and Prometheus' query API sees the service's request counter.
Then the MLflow server is killed while the compiled pipeline runs (`mlops pipeline run`, kfp.local):
one clear line, exit 1, nothing promoted (read straight from PostgreSQL). Every server wants its
password; the service reads the registry as the read-only `serving` user (403 on any write), also
after a whole restart of the stack. The stack is torn down however the tests end, and no recorded
process may survive it.

The stack keeps to its own home (`make demo` then `make stack`): it runs in a folder that is also the
working directory and holds a copy of the run's `mlops demo` home (tests/demo_home.py) as `.mlops`,
so both homes take their defaults (`.mlops` and the stack profile's `.mlops-stack`). The demo's
pipeline promoted version 1 in the embedded SQLite store, its service cached it, claimed its log and
logged its answers; answers of versions 1 and 2 dated ten minutes ahead are added to that log, inside
any window the stack's jobs read, so a stack that read the embedded log would count them. Every file
of the embedded home is hashed before the stack starts; the stack serves nothing (503) until its own
pipeline promotes its own version 1, its drift job and its canary judge count exactly the stack's
answers, its settings pointed at the embedded home are refused in one line, and after `stack down`
the embedded home is byte-identical.

The first run calls the pipeline's steps in this process (the inline runner, pipelines/orchestration/inline_runner.py):
kfp.local starts a fresh interpreter per step, which on two shared cores costs minutes, and
tests/e2e/test_pipeline_e2e.py already runs that path; the stores are what is new here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import httpx
import pandas as pd
import pytest
import redis
from demo_home import DemoRun, demo_copy
from prometheus_stack import free_port, until
from stack_binaries import NEEDS_SERVERS

from feature_repo.store import materialize_online
from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.errors import ConfigError, RegistryError, StackError
from mlops.log_owner import log_owner
from mlops.prediction_frame import read_prediction_frame
from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir
from mlops.settings import Settings
from monitoring.canary import run_canary
from monitoring.job import run_drift
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec
from native_stack import processes as procs
from native_stack import supervisor
from native_stack.settings import StackSettings
from pipelines.demo import replay_start
from pipelines.demo_replay import request_body
from pipelines.orchestration.runner import run_pipeline
from pipelines.settings import PipelineSettings
from pipelines.steps.preprocess import time_split

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800), NEEDS_SERVERS]
ROWS = 3000
REQUESTS = 40
EMBEDDED_ANSWERS, BEFORE_CANARY, DURING_CANARY = 60, 40, 30


@dataclass(frozen=True)
class EmbeddedHome:
    """The demo's home beside the stack, what it held before the stack started, and what the stack's
    service answered before its own pipeline ran: (/predict status, /v2/health/ready status)."""

    path: Path
    version: str | None
    hashes: dict[str, str]
    answered_before_promotion: tuple[int, int]


@dataclass
class RunningStack:
    settings: StackSettings
    contract: DataContract
    data: pd.DataFrame
    source: Path
    bodies: list[dict[str, object]]  # the test split as /predict bodies
    embedded: EmbeddedHome

    @property
    def stack(self) -> supervisor.Stack:
        return supervisor.Stack(self.settings)

    def query(self, expr: str) -> list[dict[str, object]]:
        body = httpx.get(f"{self.stack.prometheus_url}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert body["status"] == "success", body
        result: list[dict[str, object]] = body["data"]["result"]
        return result


def _hashes(home: Path) -> dict[str, str]:
    return {str(path.relative_to(home)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(home.rglob("*")) if path.is_file()}


def _embedded_home(demo: DemoRun, bodies: list[dict[str, object]]) -> str | None:
    """The run's `mlops demo` home copied to ./.mlops, then answers dated ahead in its log; returns the
    promoted version."""
    demo_copy(demo, Path(".mlops").resolve())
    settings = Settings()
    log = PredictionLog(log_dir(settings), fsync_interval_s=0)
    ahead = datetime.now(UTC) + timedelta(minutes=10)
    contract = load_contract(settings.contract_path)
    for n, body in enumerate(bodies):
        log.append(PredictionRecord(
            event_id=f"embedded-{n}", event_timestamp=ahead, logged_at=ahead + timedelta(seconds=n),
            entities={e.join_key: str(body[e.join_key]) for e in contract.entities},
            inputs={name: body[name] for name in contract.raw_inputs}, features={}, unknown_entities=[],
            unknown_categories=[], probability=0.5, decision=contract.decisions.negative,
            model_name=settings.model_name, model_version=str(1 + n % 2)))
    log.close()
    return registry.alias_version(settings)


def _answered_before_promotion(settings: StackSettings, body: dict[str, object]) -> tuple[int, int]:
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.port}", timeout=30) as http:
        time.sleep(3)  # a few of the service's registry polls (every 1 s)
        return http.post("/predict", json=body).status_code, http.get("/v2/health/ready").status_code


@pytest.fixture(scope="module")
def running(demo_run: DemoRun) -> Iterator[RunningStack]:
    # Not pytest's tmp_path: its parent is root-only (0700), and postgres runs as its own account.
    work = Path(tempfile.mkdtemp(prefix="mlops-stack-"))
    work.chmod(0o711)
    ports = {name: free_port() for name in ("mlflow", "redis", "pushgateway", "serving", "postgres", "prometheus")}
    env = {"MLOPS_PROFILE": "stack", "MLOPS_MAX_EPOCHS": "2",
           "MLOPS_TRACKING_URI": f"http://127.0.0.1:{ports['mlflow']}",
           "MLOPS_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
           "MLOPS_PUSHGATEWAY_URL": f"http://127.0.0.1:{ports['pushgateway']}",
           "MLOPS_PORT": str(ports["serving"]), "MLOPS_STACK_POSTGRES_PORT": str(ports["postgres"]),
           "MLOPS_STACK_PROMETHEUS_PORT": str(ports["prometheus"]), "MLOPS_STACK_SCRAPE_INTERVAL_S": "1",
           "MLOPS_MODEL_POLL_INTERVAL_S": "1", "MLOPS_DRIFT_RETRAIN": "false"}
    with pytest.MonkeyPatch.context() as patch:
        # Both homes take their defaults: the embedded `.mlops` and the stack profile's `.mlops-stack`.
        patch.chdir(work)
        for name in ("MLOPS_HOME", "MLOPS_PROFILE", "MLOPS_TRACKING_URI", "MLOPS_SETTINGS_JSON"):
            patch.delenv(name, raising=False)
        data = generate_transactions(ROWS, seed=11)
        source = work / "transactions.parquet"
        data.to_parquet(source, index=False)
        contract = load_contract(Settings().contract_path)
        bodies = [request_body(row, contract) for _, row in time_split(data, contract)["test"].iterrows()]
        version = _embedded_home(demo_run, bodies[:EMBEDDED_ANSWERS])
        before = _hashes(work / ".mlops")
        for key, value in env.items():
            patch.setenv(key, value)
        settings = StackSettings()
        records: dict[str, procs.ProcessRecord] = {}
        try:
            started = time.monotonic()
            records = supervisor.up(settings)
            print(f"stack up in {time.monotonic() - started:.1f} s")
            embedded = EmbeddedHome(work / ".mlops", version, before, _answered_before_promotion(settings, bodies[0]))
            yield RunningStack(settings, contract, data, source, bodies, embedded)
        finally:
            supervisor.down(settings)
            survivors = [f"{r.name} (pid {r.pid})" for r in records.values() if procs.is_running(r)]
            unchanged = _hashes(work / ".mlops") == before
            shutil.rmtree(work, ignore_errors=True)
            assert not survivors, f"still running after stack down: {survivors}"
            assert unchanged, "the stack changed or added a file of the embedded home"


def test_stack_is_configured_by_the_profile(running: RunningStack) -> None:
    settings = running.settings
    assert settings.online_store == "redis"
    assert settings.tracking_http_retries == 2  # from profiles/stack.env, under the environment's ports
    assert settings.resolved_tracking_uri == os.environ["MLOPS_TRACKING_URI"]
    backend = supervisor.backend_store_uri(running.stack)
    assert backend.startswith("postgresql+psycopg2://mlflow:")
    assert set(supervisor.status(settings).values()) == {True}
    config = (running.stack.root / "prometheus" / "prometheus.yml").read_text()
    assert f"127.0.0.1:{settings.port}" in config
    assert "dcgm" not in config
    with pytest.raises(StackError, match="already running"):
        supervisor.up(settings)


def test_every_server_of_the_stack_wants_its_password(running: RunningStack) -> None:
    """MLflow (basic-auth app) answers 401 without the admin's password, Redis refuses a client without its
    password; the generated secrets are kept 0600 and no process on this machine has one in its command line."""
    settings, stack = running.settings, running.stack
    search = f"{settings.resolved_tracking_uri}/api/2.0/mlflow/registered-models/search"
    assert httpx.get(search, timeout=10).status_code == 401
    assert httpx.get(search, auth=("admin", "not-the-password"), timeout=10).status_code == 401
    credentials = settings.tracking_credentials
    assert credentials is not None
    assert httpx.get(search, auth=credentials, timeout=10).status_code == 200
    assert httpx.get(f"{settings.resolved_tracking_uri}/health", timeout=10).status_code == 200  # probes need none

    port = stack.ports["redis"]
    for password in (None, "not-the-password"):
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=5).ping()
    assert redis.Redis.from_url(settings.resolved_redis_url or "", socket_timeout=5).ping()

    kept = [stack.root / "mlflow" / "admin.password", stack.root / "mlflow" / "serving.password",
            stack.root / "mlflow" / "basic_auth.ini", stack.root / "redis" / "redis.password",
            stack.root / "redis" / "redis.conf"]
    assert {path.name: oct(path.stat().st_mode & 0o777) for path in kept} == {path.name: "0o600" for path in kept}
    users = [credentials[1], (stack.root / "mlflow" / "serving.password").read_text().strip(),
             (stack.root / "redis" / "redis.password").read_text().strip()]
    secrets = [*users, supervisor.backend_store_uri(stack).split(":")[2].split("@")[0]]
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace")
        except OSError:  # the process ended
            continue
        assert not [s for s in secrets if s in argv], f"a password in the command line of {cmdline.parent.name}"
    # Nor in the environment the supervisor handed to any of its processes (MLflow gets its store's URI there;
    # redis-server and the service, once feast imported setproctitle, blank that area of /proc themselves).
    for record in stack.records().values():
        handed = _environ(record.pid)
        assert not [name for name, value in handed.items() if any(s in value for s in users)], record.name


def _environ(pid: int) -> dict[str, str]:
    """The environment a process was started with (/proc/PID/environ)."""
    pairs = (item.decode(errors="replace").partition("=") for item in Path(f"/proc/{pid}/environ").read_bytes()
             .split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def _keys(client: redis.Redis) -> int:
    return cast(int, client.dbsize())


@pytest.fixture(scope="module")
def promoted(running: RunningStack) -> str:
    """The first pipeline run on the stack (both tests below need it, in either order): its version."""
    started = time.monotonic()
    # The pipeline's own settings, read from the stack's environment (yielded inside it).
    outcome = run_pipeline(str(running.source), PipelineSettings(), run_name="on-stack", runner="inline")
    print(f"pipeline steps on the stack: {time.monotonic() - started:.1f} s")
    assert outcome.decision == "promote"
    assert outcome.version is not None
    assert registry.alias_version(running.settings) == outcome.version
    return outcome.version


def test_pipeline_on_the_stack_promotes_and_the_service_serves_it(running: RunningStack, promoted: str) -> None:
    settings, contract, version = running.settings, running.contract, promoted
    # The registry lives in PostgreSQL, the artifacts behind the server: nothing of MLflow under home.
    assert not (settings.resolved_home / "mlflow.db").exists()
    assert any((running.stack.root / "mlflow" / "artifacts").rglob("model.onnx"))

    written = materialize_online(settings, contract, replay_start(running.data, contract))
    assert sum(written.values()) > 0
    online = redis.Redis.from_url(settings.resolved_redis_url or "")
    assert _keys(online) > 0
    assert not (settings.feast_dir / "online.db").exists()

    base = f"http://127.0.0.1:{settings.port}"
    until(lambda: httpx.get(f"{base}/healthz", timeout=5).status_code == 200, "the service to load the model", 120)
    test = time_split(running.data, contract)["test"].head(REQUESTS)
    with httpx.Client(base_url=base, timeout=30) as http:
        for _, row in test.iterrows():
            answer = http.post("/predict", json=request_body(row, contract))
            assert answer.status_code == 200, answer.text
            assert answer.json()["model_version"] == version
        keys_before = _keys(online)
        new_card = {**request_body(test.iloc[-1], contract), contract.id_column: "T-stack-new-card",
                    contract.entity("customer").join_key: "C-stack-never-seen"}
        answer = http.post("/predict", json=new_card)
        assert answer.status_code == 200, answer.text
        assert answer.json()["unknown_entities"] == ["customer"]
    assert _keys(online) > keys_before  # the service's write-through of the new card went to Redis

    expr = 'sum(mlops_requests_total{job="prediction-service",route="/predict",status="200"})'

    def scraped_all() -> bool:
        result = running.query(expr)
        return bool(result) and float(result[0]["value"][1]) >= REQUESTS + 1  # type: ignore[index]

    until(scraped_all, f"Prometheus to scrape {REQUESTS + 1} predictions", 30)
    assert running.query('up{job="pushgateway"} == 1')


def _registry_in_postgres(running: RunningStack) -> tuple[list[str], list[str]]:
    """(versions holding the serving alias, all versions) of the model, read from MLflow's tables."""
    import psycopg2

    uri = supervisor.backend_store_uri(running.stack).replace("postgresql+psycopg2://", "postgresql://")
    name = running.settings.model_name
    with psycopg2.connect(uri) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT version FROM registered_model_aliases WHERE name = %s AND alias = %s",
                       (name, running.settings.serving_alias))
        holding = [str(row[0]) for row in cursor.fetchall()]
        cursor.execute("SELECT version FROM model_versions WHERE name = %s ORDER BY version", (name,))
        versions = [str(row[0]) for row in cursor.fetchall()]
    connection.close()
    return holding, versions


def test_killing_mlflow_mid_run_fails_clearly_and_promotes_nothing(running: RunningStack, promoted: str) -> None:
    before = _registry_in_postgres(running)
    assert before[0] == [promoted]
    try:
        _kill_mlflow_during_a_run(running, before)
    finally:
        # The module's other tests (any order) need the server again; recorded so stack down stops it.
        restarted = supervisor.start_service(running.stack, "mlflow")
        procs.write_records(running.stack.records_path, {**running.stack.records(), "mlflow": restarted})
    assert registry.alias_version(running.settings) == promoted  # the restarted server lost nothing


def _kill_mlflow_during_a_run(running: RunningStack, before: tuple[list[str], list[str]]) -> None:
    settings = running.settings
    command = subprocess.Popen([sys.executable, "-m", "mlops_cli", "pipeline", "run", str(running.source)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed_after = ""
    assert command.stdout is not None
    for line in command.stdout:
        if line.startswith("ingest"):
            killed_after = line.strip()
            assert procs.stop(running.stack.records()["mlflow"], sig=signal.SIGKILL)
            break
    stdout, stderr = command.communicate(timeout=600)
    assert killed_after, f"no ingest line; stdout: {stdout}; stderr: {stderr}"
    assert command.returncode == 1, stderr
    first_line = stderr.strip().splitlines()[0]
    assert first_line == (f"error: pipeline stopped at validate: cannot reach the MLflow tracking server at "
                          f"{settings.resolved_tracking_uri}: connection refused; nothing was promoted"), stderr
    assert "Traceback" not in stdout + stderr
    # Fail closed over a real server: an outage is an error, never "no production model".
    with pytest.raises(RegistryError, match=r"unreachable|failed"):
        registry.alias_version(settings)
    assert _registry_in_postgres(running) == before
    print(f"killed MLflow after `{killed_after}`; the run said: {first_line}")


REPLICA_READY_LIMIT_S = 15.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process (/proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_replica_started_with_mlflow_killed_serves_its_cached_model(running: RunningStack, promoted: str) -> None:
    """The stack's service cached the promoted version; with MLflow killed, a new replica serves it.

    Its own CPU time to its first answer stays under 15 s (a property of the replica, whatever the
    load); its wall time is printed, not asserted: a start-up time belongs in a benchmark
    (benchmarks/serving_side_by_side.py), and the suite's own load once stretched it to 17 s.
    """
    settings, contract = running.settings, running.contract
    base = f"http://127.0.0.1:{settings.port}"
    until(lambda: httpx.get(f"{base}/healthz", timeout=5).json().get("model_version") == promoted,
          "the stack's service to serve (and cache) the promoted version", 120)
    body = request_body(time_split(running.data, contract)["test"].iloc[0], contract)
    assert procs.stop(running.stack.records()["mlflow"], sig=signal.SIGKILL)
    log_path, port = running.stack.log("replica"), free_port()
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        started, started_at = time.monotonic(), time.strftime("%H:%M:%S")
        replica = subprocess.Popen([sys.executable, "-m", "mlops_cli", "serve"], stdout=log,
                                   stderr=subprocess.STDOUT, env={**os.environ, "MLOPS_PORT": str(port)})
    try:
        try:
            answer = _first_answer(replica, url, body, started, log_path)
            ready_after, cpu = time.monotonic() - started, _cpu_seconds(replica.pid)
            print(f"replica with MLflow killed: ready and answering /predict from its cache {ready_after:.1f} s "
                  f"after its process started (at {started_at}), {cpu:.1f} s of CPU; load {os.getloadavg()[0]:.1f}")
            assert answer.json()["model_version"] == promoted
            assert cpu < REPLICA_READY_LIMIT_S, log_path.read_text()
            health = httpx.get(f"{url}/healthz", timeout=5).json()
            assert (health["source"], health["model_version"]) == ("cache", promoted)
            assert "registry unreachable at start" in health["warning"]
            assert "mlops_model_from_cache 1.0" in httpx.get(f"{url}/metrics", timeout=5).text
            assert "serving the cached model until it answers" in log_path.read_text()
        finally:
            restarted = supervisor.start_service(running.stack, "mlflow")
            procs.write_records(running.stack.records_path, {**running.stack.records(), "mlflow": restarted})
        # The registry is back: the poller replaces the cached model with the registry's.
        until(lambda: httpx.get(f"{url}/healthz", timeout=5).json()["source"] == "registry",
              "the replica to reload from the restarted registry", 60)
        assert "mlops_model_from_cache 0.0" in httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        replica.terminate()
        replica.wait(timeout=30)
    assert "Traceback" not in log_path.read_text()


def _first_answer(replica: subprocess.Popen[bytes], url: str, body: dict[str, object], started: float,
                  log_path: Path) -> httpx.Response:
    """The replica's first 200 to /predict, polled every 0.1 s from its start (a dead replica fails at once)."""
    while time.monotonic() - started < 120:
        assert replica.poll() is None, f"the replica exited: {log_path.read_text()[-3000:]}"
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                print(f"replica ready after {time.monotonic() - started:.1f} s")
                answer = httpx.post(f"{url}/predict", json=body, timeout=10)
                assert answer.status_code == 200, answer.text
                return answer
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the replica was not ready within 120 s")


def test_the_service_reads_the_registry_as_serving_and_cannot_write_it(running: RunningStack, promoted: str) -> None:
    """The stack's service authenticates as `serving`, a user without a grant (default_permission READ).

    With `serving`'s credentials the registry answers reads and refuses every write (403). That they
    are the service's: once `serving`'s password in MLflow no longer matches its file, the service's
    registry read fails (a service given the admin would not notice), and the supervisor's
    ensure_serving_user (what `up` runs) sets it back from the file and the service reads again.
    """
    settings, stack = running.settings, running.stack
    api, base = f"{settings.resolved_tracking_uri}/api/2.0/mlflow", f"http://127.0.0.1:{settings.port}"
    name = settings.model_name
    reader = ("serving", (stack.root / "mlflow" / "serving.password").read_text().strip())
    admin = settings.tracking_credentials
    assert admin is not None
    assert reader[1] != admin[1]
    with httpx.Client(auth=reader, timeout=10) as http:
        assert http.get(f"{api}/registered-models/search").status_code == 200
        model = http.get(f"{api}/registered-models/get", params={"name": name})
        assert model.status_code == 200, model.text
        assert {"alias": settings.serving_alias, "version": promoted} in model.json()["registered_model"]["aliases"]
        writes = {"alias": http.post(f"{api}/registered-models/alias",
                                     json={"name": name, "alias": "stolen", "version": promoted}),
                  "version": http.post(f"{api}/model-versions/create", json={"name": name, "source": "/tmp/x"}),
                  "describe": http.patch(f"{api}/registered-models/update", json={"name": name, "description": "x"}),
                  "user": http.post(f"{api}/users/create", json={"username": "x", "password": "y"})}
        assert {what: answer.status_code for what, answer in writes.items()} == dict.fromkeys(writes, 403)

    until(lambda: httpx.get(f"{base}/healthz", timeout=5).json().get("model_version") == promoted,
          "the service to serve the promoted version", 120)
    assert httpx.post(f"{base}/admin/reload", timeout=30).status_code == 200
    changed = httpx.patch(f"{api}/users/update-password", auth=admin, timeout=10,
                          json={"username": "serving", "password": "not-the-files"})
    assert changed.status_code == 200, changed.text
    try:
        assert httpx.get(f"{api}/registered-models/search", auth=reader, timeout=10).status_code == 401
        refused = httpx.post(f"{base}/admin/reload", timeout=30)
        assert refused.status_code == 503, refused.text  # the service's read failed: it is `serving`
    finally:
        assert supervisor.ensure_serving_user(stack) == "updated"
    reread = httpx.post(f"{base}/admin/reload", timeout=30)
    assert reread.status_code == 200, reread.text
    assert reread.json()["model_version"] == promoted


def test_the_jobs_work_against_the_authenticated_registry(running: RunningStack, promoted: str) -> None:
    """The scheduled canary job and the registry listing, as their own processes, with the settings' credentials."""
    for argv, expected in ((["model", "canary", "judge", "--if-running"], "nothing to judge"),
                           (["model", "list"], promoted)):
        done = subprocess.run([sys.executable, "-m", "mlops_cli", *argv], capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert expected in done.stdout, done.stdout
        assert "401" not in done.stdout + done.stderr


def test_a_restarted_stack_keeps_its_users_and_serves(running: RunningStack, promoted: str) -> None:
    """`stack down` then `up` on the same state: the service's user exists already and signs in with the
    same file's password (nothing rewritten), and the restarted service reads the registry with it and answers."""
    settings, stack = running.settings, running.stack
    password = (stack.root / "mlflow" / "serving.password").read_text()
    assert set(supervisor.down(settings)) == set(supervisor.ORDER)
    started = time.monotonic()
    supervisor.up(settings)
    print(f"stack restarted in {time.monotonic() - started:.1f} s")
    assert (stack.root / "mlflow" / "serving.password").read_text() == password
    admin = (settings.tracking_credentials or ("", ""))[1]
    assert os.environ["MLFLOW_TRACKING_PASSWORD"] == admin  # this process' registry calls put it there...
    for record in stack.records().values():  # ...and none of the processes it started got it
        assert not [k for k, v in _environ(record.pid).items() if admin in v], record.name
    assert supervisor.ensure_serving_user(stack) == "unchanged"  # it was there with this password: no error
    base = f"http://127.0.0.1:{settings.port}"
    until(lambda: httpx.get(f"{base}/healthz", timeout=5).json().get("source") == "registry",
          "the restarted service to load the promoted version from the registry", 120)
    body = request_body(time_split(running.data, running.contract)["test"].iloc[0], running.contract)
    answer = httpx.post(f"{base}/predict", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_version"] == promoted


def test_the_embedded_home_beside_the_stack_is_the_demos_and_the_stack_served_none_of_it(
        running: RunningStack) -> None:
    embedded, settings = running.embedded, running.settings
    assert embedded.version == "1"
    assert any(name.startswith("predictions/") for name in embedded.hashes)
    assert "mlflow.db" in embedded.hashes
    assert any(name.startswith("serving/cache/") for name in embedded.hashes)  # the demo's service cached its model
    assert log_owner(embedded.path / "predictions") == "home:mlflow.db"
    assert settings.resolved_home == embedded.path.parent / ".mlops-stack"  # the profile's own home
    predict, ready = embedded.answered_before_promotion
    assert predict == 503  # the embedded store's version 1 and its cache: not served
    assert ready != 200


def test_the_stacks_drift_job_and_canary_judge_count_only_its_own_answers(running: RunningStack,
                                                                          promoted: str) -> None:
    settings = running.settings
    with httpx.Client(base_url=f"http://127.0.0.1:{settings.port}", timeout=30) as http:
        until(lambda: http.get("/healthz").json().get("model_version") == promoted, "the stack's version", 120)
        assert http.get("/healthz").json()["registry"] == settings.resolved_tracking_uri  # the stack's, no password
        for body in running.bodies[:BEFORE_CANARY]:  # a window the drift job judges, whatever ran before
            answer = http.post("/predict", json=body)
            assert answer.status_code == 200, answer.text
        stack_log = log_dir(MonitoringSettings())
        assert stack_log == settings.resolved_home / "predictions"
        drift = run_drift(MonitoringSettings(), WindowSpec())
        logged = read_prediction_frame(stack_log)
        assert drift.rows == len(logged), drift  # the embedded log's answers, dated ahead, are not in it
        assert not logged["event_id"].str.startswith("embedded-").any()
        assert log_owner(stack_log) == settings.resolved_tracking_uri  # claimed by the stack's own service
        # The stack's settings pointed at the embedded home: refused in one line, nothing read.
        with pytest.raises(ConfigError, match="belongs to the home's own store"):
            log_dir(MonitoringSettings(home=running.embedded.path))

        champion = registry.client(settings).get_model_version(settings.model_name, promoted)
        second = registry.register_version(settings, str(champion.source), champion.run_id or "", {})
        registry.start_canary(settings, second, 50, actor="test", reason="the stack's own canary")
        try:
            for body in running.bodies[BEFORE_CANARY:BEFORE_CANARY + DURING_CANARY]:
                answer = http.post("/predict", json=body)
                assert answer.status_code == 200, answer.text
            verdict = run_canary(MonitoringSettings(), act=False, actor="test").verdict
        finally:
            registry.rollback(settings, actor="test", reason="the module's other tests serve production alone")
            assert http.post("/admin/reload").status_code == 200
    assert verdict.canary_version == second
    assert verdict.canary_rows + verdict.champion_rows == DURING_CANARY, verdict
