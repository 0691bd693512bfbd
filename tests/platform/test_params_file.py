"""params.yaml as a settings source: read only when MLOPS_PARAMS_FILE names it, environment
variables still win, and a bad file is refused in one line naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from mlops.errors import ConfigError
from mlops.settings import PARAMS_FILE_VARIABLE
from mlops_cli.app import app
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.unit

runner = CliRunner()


@pytest.fixture
def params_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A params.yaml in the working directory, with no MLOPS_* variable for the settings it holds."""
    for name in ("MAX_EPOCHS", "HIDDEN_SIZES", "PROMOTION_MARGIN"):
        monkeypatch.delenv(f"MLOPS_{name}", raising=False)
    monkeypatch.delenv(PARAMS_FILE_VARIABLE, raising=False)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "params.yaml"
    path.write_text("max_epochs: 3\nhidden_sizes: [16, 8]\npromotion_margin: 0.05\n")
    return path


def test_a_params_file_is_ignored_unless_named(params_file: Path) -> None:
    assert PipelineSettings().max_epochs == PipelineSettings.model_fields["max_epochs"].default


def test_the_named_params_file_sets_settings(params_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PARAMS_FILE_VARIABLE, params_file.name)  # relative: to the working directory, as DVC runs
    settings = PipelineSettings()
    assert (settings.max_epochs, settings.hidden_sizes, settings.promotion_margin) == (3, (16, 8), 0.05)


def test_environment_variables_win_over_the_params_file(params_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PARAMS_FILE_VARIABLE, str(params_file))
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "7")
    settings = PipelineSettings()
    assert (settings.max_epochs, settings.hidden_sizes) == (7, (16, 8))


def test_a_missing_params_file_is_a_config_error(params_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PARAMS_FILE_VARIABLE, "nowhere.yaml")
    with pytest.raises(ConfigError, match=r"MLOPS_PARAMS_FILE=nowhere.yaml: no such file"):
        PipelineSettings()


def test_a_key_that_names_no_setting_is_refused(params_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    params_file.write_text("max_epoch: 3\n")
    monkeypatch.setenv(PARAMS_FILE_VARIABLE, str(params_file))
    with pytest.raises(ValidationError, match="max_epoch"):
        PipelineSettings()


@pytest.mark.parametrize(("content", "expected"), [
    ("max_epochs: [3\n", "is not valid YAML"),
    ("- 3\n", "must map setting names to values, not hold a list"),
    ("port: many\n", "invalid MLOPS_* setting or in MLOPS_PARAMS_FILE="),
])
def test_the_cli_refuses_a_bad_params_file_in_one_line(params_file: Path, monkeypatch: pytest.MonkeyPatch,
                                                       content: str, expected: str) -> None:
    params_file.write_text(content)
    monkeypatch.setenv(PARAMS_FILE_VARIABLE, str(params_file))
    result = runner.invoke(app, ["model", "list"])
    assert result.exit_code == 2
    assert expected in result.output
    assert "Traceback" not in result.output


def test_precedence_is_environment_then_params_file_then_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sources at once (a DVC stage against `make stack`): the profile sets MLOPS_PORT=8000."""
    monkeypatch.delenv("MLOPS_PORT", raising=False)
    monkeypatch.delenv("MLOPS_PUSHGATEWAY_URL", raising=False)
    monkeypatch.delenv("MLOPS_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("port: 8123\n")
    monkeypatch.setenv("MLOPS_PROFILE", "stack")
    monkeypatch.setenv(PARAMS_FILE_VARIABLE, "params.yaml")
    settings = PipelineSettings()
    assert settings.port == 8123  # params file over profile
    assert settings.pushgateway_url == "http://127.0.0.1:9091"  # profile over default
    monkeypatch.setenv("MLOPS_PORT", "8456")
    assert PipelineSettings().port == 8456  # environment over both
