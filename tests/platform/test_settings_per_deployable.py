"""One settings class per deployable on the shared base: each reads the same profile and params
file, takes its own settings from them, leaves the other deployables' alone, and still refuses a
key that no deployable declares."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from pydantic import ValidationError

from ci_gates.settings import GateSettings
from mlops.settings import DEPLOYABLE_FIELDS, PARAMS_FILE_VARIABLE, Settings
from monitoring.settings import MonitoringSettings
from native_stack.settings import StackSettings
from pipelines.settings import PipelineSettings
from serving.settings import ServingSettings

pytestmark = pytest.mark.unit

DEPLOYABLES: tuple[type[Settings], ...] = (PipelineSettings, ServingSettings, MonitoringSettings, StackSettings,
                                          GateSettings)
EVERY_CLASS: tuple[type[Settings], ...] = (Settings, *DEPLOYABLES)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in ("MLOPS_PROFILE", PARAMS_FILE_VARIABLE, "MLOPS_SHADOW", "MLOPS_DRIFT_MIN_ROWS",
                 "MLOPS_STACK_POSTGRES_PORT", "MLOPS_GATE_MIN_F1", "MLOPS_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_the_list_of_deployable_settings_is_what_the_classes_add_to_the_base() -> None:
    # What each adds to the class it extends (the gates train, so theirs extends the pipeline's).
    added = [set(kind.model_fields) - set(cast(type[Settings], kind.__mro__[1]).model_fields) for kind in DEPLOYABLES]
    assert set().union(*added) == DEPLOYABLE_FIELDS
    assert sum(map(len, added)) == len(DEPLOYABLE_FIELDS)  # no setting declared by two deployables


def test_every_deployable_reads_the_stack_profile(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MLOPS_PROFILE", "stack")
    clean_env.setenv("MLOPS_STACK_POSTGRES_PORT", "15432")
    for kind in EVERY_CLASS:
        assert kind().resolved_tracking_uri == "http://127.0.0.1:5000", kind.__name__
    assert StackSettings().stack_prometheus_port == 9090  # the profile's line
    assert StackSettings().stack_postgres_port == 15432  # the environment wins over it
    assert not hasattr(ServingSettings(), "stack_prometheus_port")


def test_a_params_file_key_goes_to_its_deployable_only(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("shadow: true\ndrift_min_rows: 7\ngate_min_f1: 0.25\nmax_epochs: 3\n")
    clean_env.setenv(PARAMS_FILE_VARIABLE, "params.yaml")
    assert ServingSettings().shadow is True
    assert MonitoringSettings().drift_min_rows == 7
    assert GateSettings().gate_min_f1 == 0.25
    for pipeline_kind in (PipelineSettings, GateSettings):
        assert pipeline_kind().max_epochs == 3, pipeline_kind.__name__
    assert not hasattr(Settings(), "shadow")
    assert not hasattr(ServingSettings(), "max_epochs")  # the training settings are the pipeline's alone


@pytest.mark.parametrize("kind", EVERY_CLASS)
def test_a_params_file_key_no_deployable_declares_is_refused_by_each(
        clean_env: pytest.MonkeyPatch, tmp_path: Path, kind: type[Settings]) -> None:
    (tmp_path / "params.yaml").write_text("shadow: true\nshadows: true\n")
    clean_env.setenv(PARAMS_FILE_VARIABLE, "params.yaml")
    with pytest.raises(ValidationError, match="shadows\n  Extra inputs are not permitted"):
        kind()


def test_an_environment_variable_of_another_deployable_or_of_none_is_ignored(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("MLOPS_SHADOW", "true")
    clean_env.setenv("MLOPS_NO_SUCH_SETTING", "1")
    assert MonitoringSettings().drift_min_rows == 30
    assert ServingSettings().shadow is True


def test_a_profile_line_no_deployable_declares_is_refused(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "typo.env").write_text("MLOPS_SHADOW=true\nMLOPS_SHADOWS=true\n")
    clean_env.setattr("mlops.settings.PROFILES_DIR", tmp_path)
    clean_env.setenv("MLOPS_PROFILE", "typo")
    for kind in EVERY_CLASS:
        with pytest.raises(ValidationError, match="mlops_shadows\n  Extra inputs are not permitted"):
            kind()
