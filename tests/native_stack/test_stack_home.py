"""`make demo` then `make stack` (issue 30, point 3, acceptance 4): the stack keeps to its own home.

The embedded home is made by the real `mlops demo` (what `make demo` runs; the run's one demo,
tests/demo_home.py, shared with tests/e2e/test_demo.py), copied into a temporary folder that is also
the working directory, so both homes take their defaults (`.mlops` and the stack profile's
`.mlops-stack`): the demo's pipeline promoted version 1 in the embedded SQLite store, the demo's
service cached it, claimed its log and logged its answers. Answers
of versions 1 and 2 dated ten minutes ahead are added to that log, inside any window the stack's
jobs read, so a stack that read the embedded log would count them. Every file of the embedded home
is hashed before the stack starts; then the stack serves nothing (503) until its own pipeline
promotes its own version 1, answers traffic, its drift job and its canary judge (a second version
at a 50 % canary) count exactly the stack's answers, the stack's settings pointed at the embedded
home are refused in one line, and after `stack down` the embedded home is byte-identical.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from demo_home import DemoRun, demo_copy
from prometheus_stack import free_port, until
from stack_binaries import NEEDS_SERVERS

from mlops import registry
from mlops.contract import load_contract
from mlops.data.generator import generate_transactions
from mlops.errors import ConfigError
from mlops.log_owner import log_owner
from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir
from mlops.settings import Settings
from monitoring.canary import run_canary
from monitoring.job import run_drift
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec
from native_stack import processes as procs
from native_stack import supervisor
from native_stack.settings import StackSettings
from pipelines.demo_replay import request_body
from pipelines.orchestration.runner import run_pipeline
from pipelines.settings import PipelineSettings
from pipelines.steps.preprocess import time_split

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800), NEEDS_SERVERS]
ROWS = 3000
BEFORE_CANARY, DURING_CANARY = 40, 30


def _hashes(home: Path) -> dict[str, str]:
    return {str(path.relative_to(home)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(home.rglob("*")) if path.is_file()}


def _embedded_home(demo: DemoRun, bodies: list[dict[str, object]]) -> str:
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
    return str(registry.alias_version(settings))


@pytest.fixture
def work() -> Iterator[Path]:
    """Not pytest's tmp_path: its parent is root-only (0700), and postgres runs as its own account."""
    folder = Path(tempfile.mkdtemp(prefix="mlops-stack-home-"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_stack_never_serves_reads_or_writes_the_embedded_home(work: Path, demo_run: DemoRun,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    for name in ("MLOPS_HOME", "MLOPS_PROFILE", "MLOPS_TRACKING_URI", "MLOPS_SETTINGS_JSON"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "2")
    data = generate_transactions(ROWS, seed=11)
    source = work / "transactions.parquet"
    data.to_parquet(source, index=False)
    contract = load_contract(Settings().contract_path)
    bodies = [request_body(row, contract) for _, row in time_split(data, contract)["test"].iterrows()]
    assert _embedded_home(demo_run, bodies[:60]) == "1"
    embedded = work / ".mlops"
    before = _hashes(embedded)
    assert any(name.startswith("predictions/") for name in before)
    assert "mlflow.db" in before
    assert any(name.startswith("serving/cache/") for name in before)  # the demo's service cached its model
    assert log_owner(embedded / "predictions") == "home:mlflow.db"

    ports = {name: free_port() for name in ("mlflow", "redis", "pushgateway", "serving", "postgres", "prometheus")}
    for key, value in {"MLOPS_PROFILE": "stack", "MLOPS_TRACKING_URI": f"http://127.0.0.1:{ports['mlflow']}",
                       "MLOPS_REDIS_URL": f"redis://127.0.0.1:{ports['redis']}/0",
                       "MLOPS_PUSHGATEWAY_URL": f"http://127.0.0.1:{ports['pushgateway']}",
                       "MLOPS_PORT": str(ports["serving"]), "MLOPS_STACK_POSTGRES_PORT": str(ports["postgres"]),
                       "MLOPS_STACK_PROMETHEUS_PORT": str(ports["prometheus"]), "MLOPS_MODEL_POLL_INTERVAL_S": "1",
                       "MLOPS_DRIFT_RETRAIN": "false"}.items():
        monkeypatch.setenv(key, value)
    settings = StackSettings()
    assert settings.resolved_home == work / ".mlops-stack"  # the profile's own home, not the embedded one
    records: dict[str, procs.ProcessRecord] = {}
    try:
        records = supervisor.up(settings)
        _the_stack_keeps_to_itself(settings, source, bodies)
    finally:
        supervisor.down(settings)
    assert not [r.name for r in records.values() if procs.is_running(r)]
    assert _hashes(embedded) == before  # not a byte of the embedded home changed, and nothing was added


def _the_stack_keeps_to_itself(settings: StackSettings, source: Path, bodies: list[dict[str, object]]) -> None:
    base = f"http://127.0.0.1:{settings.port}"
    with httpx.Client(base_url=base, timeout=30) as http:
        time.sleep(3)  # a few of the service's registry polls (every 1 s)
        nothing = http.post("/predict", json=bodies[0])
        assert nothing.status_code == 503, nothing.text  # the embedded store's version 1 and its cache: not served
        assert http.get("/v2/health/ready").status_code != 200

        outcome = run_pipeline(str(source), PipelineSettings(), run_name="stack", runner="inline")
        assert (outcome.decision, outcome.version) == ("promote", "1")
        until(lambda: http.get("/healthz").json().get("model_version") == "1", "the stack's version 1", 120)
        assert http.get("/healthz").json()["registry"] == settings.resolved_tracking_uri  # the stack's, no password
        for body in bodies[:BEFORE_CANARY]:
            answer = http.post("/predict", json=body)
            assert answer.status_code == 200, answer.text
        stack_log = log_dir(MonitoringSettings())
        assert stack_log == settings.resolved_home / "predictions"
        drift = run_drift(MonitoringSettings(), WindowSpec())
        assert drift.rows == BEFORE_CANARY, drift  # the embedded log's 60 answers are not in it
        assert log_owner(stack_log) == settings.resolved_tracking_uri  # claimed by the stack's own service
        # The stack's settings pointed at the embedded home: refused in one line, nothing read.
        with pytest.raises(ConfigError, match="belongs to the home's own store"):
            log_dir(MonitoringSettings(home=settings.resolved_home.parent / ".mlops"))

        champion = registry.client(settings).get_model_version(settings.model_name, "1")
        second = registry.register_version(settings, str(champion.source), champion.run_id or "", {})
        registry.start_canary(settings, second, 50, actor="test", reason="acceptance 4")
        for body in bodies[BEFORE_CANARY:BEFORE_CANARY + DURING_CANARY]:
            answer = http.post("/predict", json=body)
            assert answer.status_code == 200, answer.text
    verdict = run_canary(MonitoringSettings(), act=False, actor="test").verdict
    assert verdict.canary_version == second
    assert verdict.canary_rows + verdict.champion_rows == DURING_CANARY, verdict
