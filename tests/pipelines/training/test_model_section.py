"""The contract's ``model:`` section: a data set names the family it trains by default, with its params
and calibration; a setting (MLOPS_* variable, params.yaml, a parent process's settings record) wins over
it, and the default ``mlp`` applies where neither says. A broken section is one line naming its field,
exit code 2, before any data is read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from threadpoolctl import threadpool_limits
from typer.testing import CliRunner

from mlops.contract import load_contract
from mlops.contract_model import MODEL_FAMILIES, ModelSection
from mlops.contracts import BUNDLED_CONTRACT
from mlops.errors import ConfigError
from mlops.settings import PARAMS_FILE_VARIABLE, SETTINGS_RECORD_VARIABLE, settings_record
from mlops_cli.app import app
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training.entry import run_training
from pipelines.training.families.bundled import family_for
from pipelines.training.families.interface import FAMILIES, register_family
from pipelines.training.families.models import load_fitted
from pipelines.training.families.xgb import XGBoostFamily
from pipelines.training.families.xgb_model import FittedXGBoost
from pipelines.training.trained_model import read_summary

pytestmark = pytest.mark.unit

runner = CliRunner()
XGBOOST_SECTION = {"family": "xgboost", "params": {"n_estimators": 12, "max_depth": 3}, "calibration": "isotonic"}


@pytest.fixture(autouse=True)
def _no_model_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No model choice from this shell: each test sets what it means."""
    for name in ("MLOPS_MODEL_FAMILY", "MLOPS_MODEL_PARAMS", "MLOPS_CALIBRATION", "MLOPS_CONTRACT_PATH",
                 PARAMS_FILE_VARIABLE, SETTINGS_RECORD_VARIABLE, "MLOPS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with threadpool_limits(limits=1):
        yield


def contract_with(tmp_path: Path, section: Any, name: str = "contract.yaml") -> Path:
    """The bundled contract with ``section`` as its ``model:`` (None: without one)."""
    raw = yaml.safe_load(BUNDLED_CONTRACT.read_text())
    if section is not None:
        raw["model"] = section
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_the_contracts_section_chooses_family_params_and_calibration_when_no_setting_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(contract_with(tmp_path, XGBOOST_SECTION)))
    settings = PipelineSettings()
    assert (settings.model_family, settings.model_params, settings.calibration) == \
        ("xgboost", {"n_estimators": 12, "max_depth": 3}, "isotonic")
    family = family_for(settings)
    assert isinstance(family, XGBoostFamily)
    assert family.params["max_depth"] == 3


def test_without_a_section_or_a_setting_the_default_mlp_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(contract_with(tmp_path, None)))
    settings = PipelineSettings()
    assert (settings.model_family, settings.model_params, settings.calibration) == ("mlp", {}, "auto")


def test_a_setting_wins_over_the_contract_and_the_sections_params_stay_with_its_family(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(contract_with(tmp_path, XGBOOST_SECTION)))
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "sklearn")
    other = PipelineSettings()
    # Another family: its own defaults, not xgboost's params or the section's calibration.
    assert (other.model_family, other.model_params, other.calibration) == ("sklearn", {}, "auto")

    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "xgboost")
    monkeypatch.setenv("MLOPS_CALIBRATION", "none")
    same = PipelineSettings()
    # The section's family named by a setting too: its params fill what the settings leave unset.
    assert (same.model_family, same.model_params, same.calibration) == ("xgboost", XGBOOST_SECTION["params"], "none")

    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"max_depth": 5}')
    assert PipelineSettings().model_params == {"max_depth": 5}


def test_params_yaml_wins_over_the_contract_and_its_null_leaves_the_choice_to_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(contract_with(tmp_path, XGBOOST_SECTION)))
    params_file = tmp_path / "params.yaml"
    monkeypatch.setenv(PARAMS_FILE_VARIABLE, str(params_file))
    params_file.write_text("model_family: mlp\nmodel_params: {}\ncalibration: auto\n")
    assert (PipelineSettings().model_family, PipelineSettings().calibration) == ("mlp", "auto")
    params_file.write_text("model_family: null\nmodel_params: null\ncalibration: null\n")
    assert PipelineSettings().model_family == "xgboost"
    # The repository's params.yaml leaves the choice to the contract (dvc repro of a contract with a section).
    repository_params = yaml.safe_load((Path(__file__).parents[3] / "params.yaml").read_text())
    assert {name: repository_params[name] for name in ("model_family", "model_params", "calibration")} == \
        {"model_family": None, "model_params": None, "calibration": None}


def test_a_step_process_keeps_the_parents_choice_from_its_settings_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kfp.local steps and torchrun ranks read the parent's settings record: the choice the parent
    resolved, even where the child would read the contract differently (an edited file mid-run)."""
    path = contract_with(tmp_path, XGBOOST_SECTION)
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(path))
    monkeypatch.setenv(SETTINGS_RECORD_VARIABLE, settings_record(PipelineSettings()))
    contract_with(tmp_path, {"family": "sklearn"})  # the same file, edited after the parent started
    child = PipelineSettings()
    assert (child.model_family, child.model_params, child.calibration) == \
        ("xgboost", XGBOOST_SECTION["params"], "isotonic")


def test_the_train_step_fits_the_contracts_family_with_its_params_and_calibration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(contract_with(tmp_path, XGBOOST_SECTION)))
    settings = PipelineSettings(device="cpu")
    out_dir = tmp_path / "model"
    run_training(split_paths(data_dir), out_dir, str(tmp_path / "checkpoints"), settings=settings)
    summary = read_summary(out_dir)
    assert summary.family == "xgboost"
    assert summary.params["max_depth"] == 3
    assert summary.epochs_run <= 12
    fitted = load_fitted(out_dir, load_contract(settings.contract_path))
    assert isinstance(fitted, FittedXGBoost)
    assert fitted.calibrator.method == "isotonic"  # the section's, forced (auto would have chosen by log loss)


@pytest.mark.parametrize(("section", "field", "message"), [
    ({"family": "lightgbm"}, "model.family",
     "model.family: unknown model family 'lightgbm'; registered: mlp, sklearn, torch, xgboost"),
    ({"family": "mlp", "params": {"hidden_sizes": [8]}}, "model.params",
     "model.params: the mlp family takes no params (got ['hidden_sizes'])"),
    ({"family": "torch", "params": {"hidden": 8}}, "model.params",
     "model.params: the torch family needs 'module', a class by import path"),
    ({"family": "sklearn", "params": {"estimator": 3}}, "model.params",
     "model.params: the sklearn family's 'estimator' is a class or function by import path"),
    ({"family": "xgboost", "params": [3, 4]}, "model.params", "model.params: Input should be a valid dictionary"),
    ({"family": "xgboost", "calibration": "beta"}, "model.calibration",
     "model.calibration: Input should be 'auto', 'platt', 'isotonic' or 'none'"),
    ({"family": "xgboost", "parameters": {}}, "model.parameters", "model.parameters: Extra inputs are not permitted"),
    ({"params": {}}, "model.family", "model.family: Field required"),
])
def test_a_broken_section_is_one_line_naming_its_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: dict[str, Any], field: str, message: str) -> None:
    path = contract_with(tmp_path, section)
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(path))
    for load in (lambda: load_contract(path), PipelineSettings):  # the contract's loader, and the settings
        with pytest.raises(ConfigError) as caught:
            load()
        assert caught.value.message.startswith(f"contract file {path} is invalid: {message}")
        assert "\n" not in caught.value.message
        assert (caught.value.field, caught.value.exit_code) == (field, 2)


def test_mlops_train_refuses_a_broken_section_in_one_line_with_exit_code_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    path = contract_with(tmp_path, {"family": "xgbost"})
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(path))
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    result = runner.invoke(app, ["train", "--data-dir", str(data_dir), "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: contract file {path} is invalid: model.family: unknown model family 'xgbost'")
    assert not (tmp_path / "out").exists()  # refused before any data was read


def test_the_section_is_not_part_of_the_contracts_fingerprint(tmp_path: Path) -> None:
    """The service checks a model against the data contract it was exported under: choosing another
    family for the data set does not make the model in production foreign to it."""
    plain = load_contract(contract_with(tmp_path, None, "plain.yaml"))
    chosen = load_contract(contract_with(tmp_path, XGBOOST_SECTION, "chosen.yaml"))
    assert chosen.model == ModelSection.model_validate(XGBOOST_SECTION)
    assert plain.model is None
    assert chosen.fingerprint == plain.fingerprint
    assert "model" not in chosen.model_dump(mode="json")


def test_a_registered_family_of_ones_own_may_be_named_in_a_contract(tmp_path: Path) -> None:
    class Shallow(XGBoostFamily):
        name = "shallow_trees"

    try:
        register_family(Shallow)
        contract = load_contract(contract_with(tmp_path, {"family": "shallow_trees"}))
        assert contract.model is not None
        assert contract.model.family == "shallow_trees"
    finally:
        FAMILIES.pop("shallow_trees", None)
        MODEL_FAMILIES.discard("shallow_trees")
