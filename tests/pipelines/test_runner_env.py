"""The settings a pipeline step or a started service inherits through the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.orchestration.environment import settings_env
from pipelines.settings import PipelineSettings


def test_settings_survive_the_environment_round_trip_secrets_included(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("MLOPS_ADMIN_TOKEN", "MLOPS_HIDDEN_SIZES", "MLOPS_HOME"):
        monkeypatch.delenv(key, raising=False)
    settings = PipelineSettings(home=tmp_path / "home", admin_token="s3cret-token", hidden_sizes=(16, 8))

    env = settings_env(settings)

    assert env["MLOPS_ADMIN_TOKEN"] == "s3cret-token"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    again = PipelineSettings()
    assert again.admin_token is not None
    assert again.admin_token.get_secret_value() == "s3cret-token"
    assert again.hidden_sizes == (16, 8)
    assert again.resolved_home == settings.resolved_home
