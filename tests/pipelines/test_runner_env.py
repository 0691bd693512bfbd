"""The settings a pipeline step or a started service inherits through the environment: a kfp.local step
or a torchrun rank one serialized settings record, a started service MLOPS_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops.errors import ConfigError
from mlops.settings import SETTINGS_RECORD_VARIABLE, Settings
from pipelines.orchestration.environment import environment, record_env, settings_env
from pipelines.settings import PipelineSettings
from serving.settings import ServingSettings

pytestmark = pytest.mark.unit


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


def test_a_step_process_takes_the_whole_settings_record_ahead_of_stray_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = PipelineSettings(home=tmp_path / "home", admin_token="s3cret-token", hidden_sizes=(16, 8),
                                max_epochs=3, tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    env = record_env(settings)
    assert list(env) == [SETTINGS_RECORD_VARIABLE]  # one variable, not a spread of MLOPS_* ones
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "99")  # inherited from the parent's shell: the record decides
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "elsewhere"))
    with environment(env):
        again = PipelineSettings()
        base, serving = Settings(), ServingSettings()  # another class reads the fields it has
        assert PipelineSettings(max_epochs=5).max_epochs == 5  # arguments still come first
    assert again == settings
    assert (base.resolved_home, serving.resolved_home) == (settings.resolved_home, settings.resolved_home)
    assert serving.tracking_uri == settings.tracking_uri
    assert PipelineSettings().max_epochs == 99  # the block restored the environment without the record


def test_a_malformed_settings_record_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SETTINGS_RECORD_VARIABLE, "{not json")
    with pytest.raises(ConfigError, match=SETTINGS_RECORD_VARIABLE):
        PipelineSettings()
