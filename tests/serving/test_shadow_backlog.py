"""The shadow scorer falling behind: its one thread held (a batch of work that waits on an Event, no
mock), the real app answering /predict with a canary (every answer pairs the champion's score) and
a challenger (every answer a shadow score). The queue stays within MLOPS_SHADOW_MAX_PENDING, the
excess is dropped and counted per role, every request is answered, and what was queued is logged."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from served_platform import ServedPlatform

from mlops import registry
from mlops.prediction_log import PAIRED_ROLE, log_dir, read_predictions
from serving.app import create_app
from serving.settings import ServingSettings
from serving.state import ServiceState

pytestmark = pytest.mark.integration

MAX_PENDING = 2
REQUESTS = 12


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _dropped(state: ServiceState, role: str) -> float:
    return state.metrics.registry.get_sample_value("mlops_shadow_dropped_rows_total", {"role": role}) or 0.0


def test_a_held_shadow_thread_drops_and_counts_the_excess_and_every_request_is_answered(
        platform_home: ServedPlatform, body: dict[str, Any]) -> None:
    settings = platform_home.settings
    candidate = registry.register_version(settings, platform_home.model_uri, platform_home.run_id, {"test": "shadow"})
    registry.start_canary(settings, candidate, 99.99, actor="test", reason="every customer but 1 in 10,000")
    registry.promote(settings, platform_home.version, alias="challenger", actor="test", reason="shadow test")
    app = create_app(settings.model_copy(update={"shadow": True, "shadow_max_pending": MAX_PENDING}))
    state: ServiceState = app.state.service
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        held.set()
        release.wait(60)

    with TestClient(app) as client:
        _wait_for(lambda: state.manager.canary is not None and state.manager.challenger is not None)
        assert state.shadow_pool.submit("test", 0, hold)
        assert held.wait(30)  # the one shadow thread is busy from now on
        pending, answered = [], []
        for n in range(REQUESTS):
            started = time.perf_counter()
            response = client.post("/predict", json={**body, "transaction_id": f"T-backlog-{n}"})
            answered.append((response.status_code, response.json().get("model_version"), time.perf_counter() - started))
            pending.append(state.shadow_pool.pending)
        exposed = client.get("/metrics").text
        release.set()
    # Leaving the block stopped the app, which scored what was queued and closed the log.

    assert [(status, version) for status, version, _ in answered] == [(200, candidate)] * REQUESTS
    assert max(seconds for _, _, seconds in answered) < 10  # never waited for the held thread
    assert max(pending) == MAX_PENDING  # reached, never passed
    # The first request's challenger and paired batches filled the queue; every later one was dropped.
    assert _dropped(state, "challenger") == _dropped(state, PAIRED_ROLE) == REQUESTS - 1
    assert f'mlops_shadow_dropped_rows_total{{role="{PAIRED_ROLE}"}} {float(REQUESTS - 1)}' in exposed
    assert f"mlops_shadow_pending {float(MAX_PENDING)}" in exposed
    logged = [r for r in read_predictions(log_dir(settings)) if r.event_id.startswith("T-backlog-")]
    roles = sorted((r.role, r.event_id) for r in logged if r.role != "canary")
    assert roles == [("challenger", "T-backlog-0"), (PAIRED_ROLE, "T-backlog-0")]
    assert sum(r.role == "canary" for r in logged) == REQUESTS
    registry.rollback(settings, actor="test", reason="done")


def test_the_queue_bound_is_a_setting_with_a_default(platform_home: ServedPlatform) -> None:
    assert platform_home.settings.shadow_max_pending == 1000
    with pytest.raises(ValueError, match="shadow_max_pending"):
        ServingSettings(shadow_max_pending=0)
