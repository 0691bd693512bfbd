"""A canary in the running service: `mlops model promote V --canary P` sends P % of /predict to V,
sticky per customer, logged with role=canary; promotion and rollback under load fail no request.

The module's own copy of the served platform, a second registered version of the
same graph (told apart by the version in each answer), and one service process polling fast.
Tests run in any order: each leaves production on the first version and no canary running.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pandas as pd
import pytest
from served_platform import ServedPlatform, sample_body
from service_process import ServiceProcess, mlops, predict_load, start_service

from mlops import registry
from mlops.prediction_frame import read_prediction_frame
from mlops.prediction_log import PAIRED_ROLE, log_dir
from monitoring.labels import join_labels, quality

pytestmark = pytest.mark.integration

CUSTOMERS = 2_000
REQUESTS = 4_000  # each customer twice (the acceptance run, 10,000 over the same customers: 9.4 % canary)
BATCH = 200


@dataclass
class Served:
    platform: ServedPlatform
    service: ServiceProcess
    candidate: str  # a second version of the same graph

    @property
    def champion(self) -> str:
        return self.platform.version


@pytest.fixture(scope="module")
def served(platform_home: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    candidate = registry.register_version(platform_home.settings, platform_home.model_uri, platform_home.run_id,
                                          {"test": "canary candidate"})
    env = {"MLOPS_HOME": str(platform_home.settings.resolved_home), "MLOPS_MODEL_POLL_INTERVAL_S": "0.2"}
    service = start_service(env, tmp_path_factory.mktemp("logs") / "service.log")
    try:
        yield Served(platform_home, service, candidate)
    finally:
        service.stop()


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _versions_of(served: Served, customers: list[str], prefix: str) -> list[str]:
    body = sample_body(served.platform)
    instances = [{**body, "customer_id": c, "transaction_id": f"{prefix}-{i}"} for i, c in enumerate(customers)]
    response = httpx.post(served.service.url + "/predict/batch", json={"instances": instances}, timeout=30)
    assert response.status_code == 200, response.text
    return [p["model_version"] for p in response.json()["predictions"]]


@dataclass
class Shared:
    """The traffic a 10 % canary served: answers per version, each customer's versions, the log's rows."""

    counted: Counter[str]
    sides: dict[str, set[str]]
    rows: pd.DataFrame


@pytest.fixture(scope="module")
def shared(served: Served) -> Shared:
    """REQUESTS predictions over CUSTOMERS customers with a 10 % canary running, then rolled back;
    its rows once the champion's paired scores of the canary's rows (off the response path) are in."""
    probe = [f"C-probe-{i}" for i in range(200)]
    mlops("model", "promote", served.candidate, "--canary", "10", "--reason", "try the candidate")
    _wait_for(lambda: served.candidate in _versions_of(served, probe, f"T-probe-{time.monotonic_ns()}"))
    customers = [f"C-canary-{i % CUSTOMERS}" for i in range(REQUESTS)]
    sides: dict[str, set[str]] = defaultdict(set)
    counted: Counter[str] = Counter()
    for start in range(0, REQUESTS, BATCH):
        chunk = customers[start:start + BATCH]
        for customer, version in zip(chunk, _versions_of(served, chunk, f"T-share-{start}"), strict=True):
            sides[customer].add(version)
            counted[version] += 1
    mlops("model", "rollback", "--reason", "share measured")

    def logged() -> pd.DataFrame:
        frame = read_prediction_frame(log_dir(served.platform.settings))
        return frame[frame["event_id"].str.startswith("T-share-")]

    _wait_for(lambda: (logged()["role"] == PAIRED_ROLE).sum() == counted[served.candidate])
    return Shared(counted, sides, logged())


def test_a_ten_percent_canary_takes_a_tenth_of_the_customers_each_always_on_its_side(
        served: Served, shared: Shared) -> None:
    counted, rows = shared.counted, shared.rows
    assert set(counted) == {served.champion, served.candidate}
    assert 0.08 <= counted[served.candidate] / REQUESTS <= 0.12
    assert all(len(versions) == 1 for versions in shared.sides.values())
    # The champion scored the canary's rows too (the paired PR-AUC), logged apart from the answers.
    assert dict(Counter(zip(rows["model_version"], rows["role"], strict=True))) == {
        (served.champion, "champion"): counted[served.champion],
        (served.candidate, "canary"): counted[served.candidate],
        (served.champion, PAIRED_ROLE): counted[served.candidate]}
    assert set(rows.loc[rows["role"] == PAIRED_ROLE, "event_id"]) == set(rows.loc[rows["role"] == "canary", "event_id"])


def test_the_quality_job_reports_canary_and_champion_apart(served: Served, shared: Shared) -> None:
    answered = shared.rows[shared.rows["role"] != PAIRED_ROLE]
    # Labels that make the two sides differ: the canary's predictions are all "right" as fraud.
    labels = pd.DataFrame({"event_id": answered["event_id"], "label": (answered["role"] == "canary").astype("int64")})

    rows = {(r.model_version, r.role): r for r in quality(join_labels(shared.rows, labels), "1D", "fraud")}

    # The champion's paired scores of the canary's rows are reported apart too.
    assert set(rows) == {(served.champion, "champion"), (served.candidate, "canary"), (served.champion, PAIRED_ROLE)}
    assert rows[(served.candidate, "canary")].positives == rows[(served.candidate, "canary")].labelled
    assert rows[(served.champion, "champion")].positives == 0


def test_canary_start_promotion_and_rollback_under_load_fail_no_request(served: Served) -> None:
    body = sample_body(served.platform)

    def recent(version: str) -> Callable[[], bool]:
        return lambda: len(answers) > 8 and {v for _, v in answers[-8:]} == {version}

    with predict_load(served.service.url, lambda worker, n: {**body, "customer_id": f"C-load-{n % 50}",
                                                             "transaction_id": f"T-load-{worker}-{n}"},
                      clients=3) as answers:
        _wait_for(lambda: len(answers) > 20)
        mlops("model", "promote", served.candidate, "--canary", "30")
        _wait_for(lambda: served.candidate in {v for _, v in answers[-30:]})
        promoted = mlops("model", "promote", served.candidate, "--reason", "canary held up")
        _wait_for(recent(served.candidate))
        stages = {v: str(registry.client(served.platform.settings).get_model_version(
            served.platform.settings.model_name, v).current_stage) for v in (served.champion, served.candidate)}
        rolled_back = mlops("model", "rollback", "--reason", "back for the next test")
        _wait_for(recent(served.champion))

    assert {status for status, _ in answers} == {200}
    assert f"none -> {served.candidate}" not in promoted  # production moved from the champion
    assert f"{served.champion} -> {served.candidate}" in promoted
    assert f"{served.candidate} -> {served.champion}" in rolled_back
    assert stages == {served.champion: "Archived", served.candidate: "Production"}
    assert registry.canary(served.platform.settings) is None


