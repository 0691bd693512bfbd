"""Progressive delivery end to end, in one run each: the real pipeline (the default canary rollout)
puts version 1 in production; a second run's accepted candidate goes to staging and a 10 % canary;
the running service (its own process, its real prediction log) answers the 8,000 transactions after
the candidate's data, from about 2,600 customers, on CLIENTS concurrent clients; then the judge the
monitoring schedule runs (`mlops model canary judge --if-running`) decides.

- A truly better candidate (eight times the rows of version 1, four epochs to its one): about a
  tenth of the customers served by it, each always on one side; a wait while labels are missing (every
  other check judged and passing), promote once they arrive; production moves, version 1 is
  archived, the service follows, and not one request fails from the first answer to the last (the
  judge promotes while the load runs).
- A candidate worse only on live traffic: its training export gave every fraud one merchant
  category (a label leak), so evaluate, on that export, sees a much better model and accepts it;
  live requests carry the real category and it flags a third of what evaluate saw it flag. The judge
  rolls it back naming the failing check and its figures; production never changes.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from live_service import serving_before
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.feature_store import backfill_offline
from mlops.registry_audit import read_verdicts
from mlops.store_location import relocate_store
from mlops_cli.app import app
from monitoring.labels import ingest_labels
from monitoring.settings import MonitoringSettings
from pipelines.demo_replay import request_body
from pipelines.orchestration.runner import PipelineOutcome, run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]
ROWS = 56_000  # 60 days of one population, in time order: ...
FIRST_ROWS = 6_000  # ... version 1 trains on the oldest 6,000,
CANDIDATE_ROWS = 48_000  # the candidate on the oldest 48,000, and the 8,000 after them are live traffic
POPULATION_ROWS = 75_000  # 3,000 customers: the live rows reach about 2,600 of them
FRAUD_RATE = 0.03
CLIENTS = 4
LEAKED_CATEGORY = "utilities"
SEED = 17


@dataclass
class Home:
    settings: PipelineSettings
    contract: DataContract
    trained: pd.DataFrame  # the candidate's rows (the oldest CANDIDATE_ROWS)
    live: pd.DataFrame  # the rows after them, posted to the service
    tmp: Path


@dataclass
class Load:
    """Every answer of one load (status, customer, version), filled by its client threads."""

    answers: list[tuple[int, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, status: int, customer: str, version: str) -> None:
        with self.lock:
            self.answers.append((status, customer, version))

    def statuses(self) -> Counter[int]:
        with self.lock:
            return Counter(status for status, _, _ in self.answers)

    def latest(self, n: int) -> set[str]:
        with self.lock:
            return {version for _, _, version in self.answers[-n:]}


def _pipeline(home: Home, source: pd.DataFrame, name: str, epochs: int) -> PipelineOutcome:
    path = home.tmp / f"{name}.parquet"
    source.to_parquet(path, index=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_MAX_EPOCHS", str(epochs))
        return run_pipeline(str(path), PipelineSettings(), run_name=name, runner="inline")


@dataclass(frozen=True)
class FirstVersion:
    """The home where the pipeline put version 1 in production, and the rows of both tests."""

    home: Path
    trained: pd.DataFrame
    live: pd.DataFrame


def _home_env(patch: pytest.MonkeyPatch, home: Path) -> None:
    patch.setenv("MLOPS_HOME", str(home))
    patch.setenv("MLOPS_MODEL_POLL_INTERVAL_S", "1")
    patch.delenv("MLOPS_ROLLOUT", raising=False)


@pytest.fixture(scope="module")
def first_version(tmp_path_factory: pytest.TempPathFactory) -> FirstVersion:
    """Version 1 in production through the pipeline with the default (canary) rollout, once for the
    module: each test works on its own copy of this home (fixture ``home``)."""
    root = tmp_path_factory.mktemp("canary-first")
    with pytest.MonkeyPatch.context() as patch:
        _home_env(patch, root / "home")
        settings = PipelineSettings()
        assert settings.rollout == "canary"
        contract = load_contract(settings.contract_path)
        data = generate_transactions(ROWS, seed=SEED, fraud_rate=FRAUD_RATE, population_rows=POPULATION_ROWS)
        ordered = data.sort_values([contract.timestamp_column, contract.id_column], kind="stable")
        made = Home(settings, contract, ordered.iloc[:CANDIDATE_ROWS], ordered.iloc[CANDIDATE_ROWS:], root)
        # Its own version 1, not a shared home's: trained on the oldest rows of the population the live rows follow.
        first = _pipeline(made, ordered.iloc[:FIRST_ROWS], "first", epochs=1)
    assert (first.decision, first.version, first.production_version) == ("promote", "1", "1")
    return FirstVersion(root / "home", made.trained, made.live)


@pytest.fixture
def home(first_version: FirstVersion, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Home:
    """This test's own copy of the module's home with version 1 in production; MLOPS_HOME points at it."""
    copy = tmp_path / "home"
    shutil.copytree(first_version.home, copy, symlinks=True, ignore=shutil.ignore_patterns("*-shm"))
    _home_env(monkeypatch, copy)
    settings = PipelineSettings()
    relocate_store(settings)  # as `mlops init` in a copied home: its MLflow store names its own artifacts
    assert registry.alias_version(settings) == "1"
    return Home(settings, load_contract(settings.contract_path), first_version.trained, first_version.live, tmp_path)


def _canary_started(home: Home, outcome: PipelineOutcome) -> str:
    """Deploy's part: the accepted candidate on staging and a canary at the default 10 %, production as it was."""
    assert outcome.decision == "promote", outcome
    version = str(outcome.version)
    assert outcome.production_version == "1"
    assert "canary" in outcome.rollout
    assert registry.alias_version(home.settings, registry.STAGING_ALIAS) == version
    assert registry.canary(home.settings) == (version, 10.0)
    assert registry.alias_version(home.settings) == "1"
    return version


def _serving(home: Home) -> AbstractContextManager[str]:
    """The service in its own process, the online store just before the live rows."""
    return serving_before(home.settings, home.contract, home.live, home.tmp)


def _post(http: httpx.Client, body: dict[str, Any], customer: str, load: Load) -> None:
    try:
        response = http.post("/predict", json=body)
    except httpx.HTTPError:
        load.add(0, customer, "")  # a request that got no answer counts as failed
        return
    version = str(response.json().get("model_version")) if response.status_code == 200 else ""
    load.add(response.status_code, customer, version)


def _lanes(rows: pd.DataFrame, contract: DataContract) -> list[pd.DataFrame]:
    """The rows in time order, split by customer over the clients: each customer's requests stay in order."""
    customer = contract.entity("customer").join_key
    ordered = rows.sort_values([contract.timestamp_column, contract.id_column], kind="stable")
    lane = ordered[customer].map(lambda c: zlib.crc32(str(c).encode()) % CLIENTS)
    return [ordered[lane == n] for n in range(CLIENTS)]


def _replay(base: str, rows: pd.DataFrame, contract: DataContract, load: Load) -> None:
    """Every row posted to /predict by CLIENTS concurrent clients; returns when all are answered."""
    customer = contract.entity("customer").join_key

    def send(lane: pd.DataFrame) -> None:
        with httpx.Client(base_url=base, timeout=60) as http:
            for _, row in lane.iterrows():
                _post(http, request_body(row, contract), str(row[customer]), load)

    threads = [threading.Thread(target=send, args=(lane,)) for lane in _lanes(rows, contract)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@contextmanager
def _load(base: str, rows: pd.DataFrame, contract: DataContract, load: Load) -> Iterator[None]:
    """Load that goes on until the block ends: the customers' next transactions after ``rows``."""
    customer, stop = contract.entity("customer").join_key, threading.Event()
    after = pd.Timestamp(rows[contract.timestamp_column].max())

    def send(lane: pd.DataFrame) -> None:
        last = lane.groupby(customer, sort=False).tail(1)
        with httpx.Client(base_url=base, timeout=60) as http:
            for n in itertools.count():
                if stop.is_set():
                    return
                row = last.iloc[n % len(last)]
                body = {**request_body(row, contract), contract.id_column: f"T-load-{row[customer]}-{n}",
                        contract.timestamp_column: (after + pd.Timedelta(seconds=n + 1)).isoformat()}
                _post(http, body, str(row[customer]), load)

    threads = [threading.Thread(target=send, args=(lane,)) for lane in _lanes(rows, contract)]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.2)


def _judge() -> str:
    """The monitoring schedule's call (infra's canary-judge CronJob)."""
    result = CliRunner().invoke(app, ["model", "canary", "judge", "--if-running"])
    assert result.exit_code == 0, result.output
    return result.output


def _sides(load: Load) -> dict[str, set[str]]:
    sides: dict[str, set[str]] = defaultdict(set)
    for _, customer, version in load.answers:
        sides[customer].add(version)
    return sides


def test_a_better_candidate_is_promoted_by_its_canary_under_load_without_a_failed_request(home: Home) -> None:
    settings, contract = home.settings, home.contract
    candidate = _canary_started(home, _pipeline(home, home.trained, "candidate", epochs=4))
    test = home.live
    load = Load()
    with _serving(home) as base:
        _replay(base, test, contract, load)
        assert load.statuses() == Counter({200: len(test)})
        sides = _sides(load)
        assert len(sides) >= 2000
        assert all(len(versions) == 1 for versions in sides.values())  # sticky per customer
        share = sum(versions == {candidate} for versions in sides.values()) / len(sides)
        assert 0.08 <= share <= 0.12, share
        assert {v for versions in sides.values() for v in versions} == {"1", candidate}

        waited = _judge()  # every check but PR-AUC has its sample and passes; PR-AUC waits for labels
        assert "verdict: wait" in waited, waited
        for check in ("latency p99", "score distribution", "decision rate"):
            assert f"{check}: pass" in waited, waited
        assert "PR-AUC: not judged; not judged yet: 0 labelled rows" in waited
        assert registry.canary(settings) == (candidate, 10.0)

        labels = home.tmp / "labels.parquet"
        test[[contract.id_column, contract.label_column]].to_parquet(labels, index=False)
        ingest_labels(labels, contract, settings.monitoring_dir)
        with _load(base, test, contract, load):  # the promotion happens under load
            _until(lambda: len(load.answers) > len(test) + 50, "load after the replay")
            promoted = _judge()
            assert "verdict: promote" in promoted, promoted
            _until(lambda: load.latest(4 * CLIENTS) == {candidate}, "every customer on the new production version")
            health = httpx.get(f"{base}/healthz", timeout=10).json()
        statuses = load.statuses()
    print(waited, promoted, f"share {share:.3f} of {len(sides)} customers; answers {dict(statuses)}", sep="\n")

    assert statuses == Counter({200: len(load.answers)})  # not one failed request, from first to last
    assert health["model_version"] == candidate
    assert registry.alias_version(settings) == candidate
    assert registry.canary(settings) is None
    stages = {v: registry.client(settings).get_model_version(settings.model_name, v).current_stage
              for v in ("1", candidate)}
    assert stages == {"1": "Archived", candidate: "Production"}
    moves = [(m.from_version, m.to_version) for m in registry.history(settings, settings.serving_alias)]
    assert moves == [(None, "1"), ("1", candidate)]
    verdicts = read_verdicts(registry.client(settings), settings)
    assert [(v.version, v.verdict) for v in verdicts] == [(candidate, "wait"), (candidate, "promote")]
    assert registry.history(settings, settings.serving_alias)[-1].reason == verdicts[-1].reason
    assert verdicts[-1].reason.startswith("canary analysis: every check passed")
    monitoring = MonitoringSettings()
    figures = verdicts[-1].figures
    assert figures["canary rows"] >= monitoring.canary_min_rows
    assert figures["PR-AUC/canary"] > 0


def test_a_candidate_worse_only_on_live_traffic_is_rolled_back_and_production_never_moves(home: Home) -> None:
    settings, contract = home.settings, home.contract
    # The candidate's export filled a charged-back transaction's merchant category from the chargeback
    # record: offline the category gives the label away (evaluate, on the same export, sees a fine model);
    # live requests carry the merchant's own category.
    fraud = home.trained[contract.label_column] == 1
    leaked = home.trained.assign(merchant_category=home.trained["merchant_category"].where(~fraud, LEAKED_CATEGORY))
    candidate = _canary_started(home, _pipeline(home, leaked, "leaked", epochs=4))
    backfill_offline(home.trained, contract, settings)  # the histories the live service has: the true ones
    test = home.live
    load = Load()
    with _serving(home) as base:
        _replay(base, test, contract, load)
        served = _sides(load)
        judged = _judge()
        with _load(base, test, contract, load):
            _until(lambda: load.latest(4 * CLIENTS) == {"1"}, "every customer back on production")
        statuses = load.statuses()
    print(judged, f"answers {dict(statuses)}", sep="\n")

    assert statuses == Counter({200: len(load.answers)})
    assert 0.08 <= sum(v == {candidate} for v in served.values()) / len(served) <= 0.12
    assert "verdict: roll back" in judged, judged
    assert registry.canary(settings) is None
    assert registry.alias_version(settings) == "1"
    assert [(m.from_version, m.to_version) for m in registry.history(settings, settings.serving_alias)] == [(None, "1")]
    (verdict,) = read_verdicts(registry.client(settings), settings)
    assert (verdict.version, verdict.verdict) == (candidate, "roll back")
    assert verdict.reason.startswith("canary analysis: failing: ")
    figures = verdict.figures
    failing = [name for name in ("score distribution", "decision rate") if f"{name}: fail" in verdict.reason]
    assert failing, verdict.reason
    for name, figure in (("score distribution", "PSI"), ("decision rate", "ratio")):
        if name in failing:
            assert f"{figure} {figures[f'{name}/{figure}']:.4g}" in verdict.reason
    # Live, it flags far fewer than evaluate saw it flag (the leak is gone), the champion as many as its own.
    assert figures["decision rate/ratio"] < 1 / figures["decision rate/limit"]
    tags = registry.client(settings).get_model_version(settings.model_name, candidate).tags
    assert (tags["decision"], tags["decision_reason"]) == ("reject", verdict.reason)
