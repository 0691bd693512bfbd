"""The model poller reads the registry through the process's one client: 100 polls of a real local
store write MLflow's process-wide state (URIs, MLFLOW_HTTP_* limits) at most once, and still see a
new version the moment the alias moves."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow_writes import MlflowGlobalWrites
from served_platform import ServedPlatform

from mlops import registry
from serving.lifecycle import ModelManager
from serving.metrics import ServiceMetrics

pytestmark = pytest.mark.integration

POLLS = 100


def test_a_hundred_polls_set_mlflows_global_state_at_most_once(
        platform_home: ServedPlatform, tmp_path: Path, mlflow_global_writes: MlflowGlobalWrites) -> None:
    settings = platform_home.settings
    manager = ModelManager(settings, platform_home.contract, tmp_path / "serving", ServiceMetrics())
    for _ in range(POLLS):
        assert manager.refresh() is None  # the registry answered
    assert manager.current is not None
    assert manager.current.served.version == platform_home.version
    # The client is not stale: a version registered and promoted between polls is the next poll's.
    newer = registry.register_version(settings, platform_home.model_uri, platform_home.run_id, tags={})
    registry.promote(settings, newer)
    assert manager.refresh() is None
    assert manager.current.served.version == newer
    assert mlflow_global_writes.uri_calls["set_tracking_uri"] <= 1, mlflow_global_writes
    assert mlflow_global_writes.most <= 1, mlflow_global_writes
