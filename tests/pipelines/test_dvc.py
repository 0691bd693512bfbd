"""The pipeline as DVC stages: dvc.yaml names commands, options, files and params
that exist; `dvc repro` in a copy of the project runs every stage on small data, a second repro
runs nothing, and a changed parameter reruns only the stages that list it (real DVC, real MLflow
on SQLite, real Feast and Great Expectations, through the venv's `dvc` and `mlops`). The copy's
contract chooses the model family in its ``model:`` section, which every stage process reads."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from mlflow.entities import RunData
from typer.testing import CliRunner

from infra.compose import command_problem
from infra.manifests import REPO_ROOT
from mlops import registry
from mlops.settings import Settings
from mlops_cli.app import app
from pipelines.orchestration import dvc_stages
from pipelines.orchestration.declaration import BUNDLED_CONTRACT_PATH
from pipelines.orchestration.dvc_stages import dvc_yaml
from pipelines.orchestration.records import DeployRecord, EvaluateRecord, IngestRecord, read_record, write_record
from pipelines.settings import PipelineSettings

DVC_FILE = REPO_ROOT / "dvc.yaml"
PARAMS_FILE = REPO_ROOT / "params.yaml"
# What a clone holds besides the stages' own deps: DVC's config (the default remote) and ignores.
PROJECT_FILES = ("dvc.yaml", "params.yaml", ".dvc/config", ".dvc/.gitignore", ".dvcignore", ".gitignore")
VENV_BIN = Path(sys.executable).parent
ENV_ASSIGNMENT = re.compile(r"^[A-Z_]+=")
TEMPLATE = re.compile(r"\$\{(\w+)\}")
STAGE_RUN = re.compile(r"Running stage '(\w+)'")
runner = CliRunner()


def stages() -> dict[str, dict[str, Any]]:
    spec: dict[str, dict[str, dict[str, Any]]] = yaml.safe_load(DVC_FILE.read_text())
    return spec["stages"]


def params() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(PARAMS_FILE.read_text())
    return values


def _paths(entries: list[Any]) -> list[str]:
    """Paths of a deps/outs/metrics list, whose entries are a path or {path: options}."""
    return [next(iter(entry)) if isinstance(entry, dict) else entry for entry in entries]


def stage_outputs() -> list[str]:
    return [path for stage in stages().values()
            for key in ("outs", "metrics", "plots") for path in _paths(stage.get(key, []))]


def repository_deps() -> set[str]:
    """Deps no stage writes: files of the repository the stages read (code, the contract)."""
    outputs = stage_outputs()
    return {dep for stage in stages().values() for dep in _paths(stage.get("deps", []))
            if not any(dep == out or dep.startswith(f"{out}/") for out in outputs)}


def argv(stage: dict[str, Any]) -> list[str]:
    """The stage's command as words: leading VAR=value assignments dropped, ${param} filled in."""
    words = shlex.split(TEMPLATE.sub(lambda m: str(params()[m.group(1)]), stage["cmd"]))
    while words and ENV_ASSIGNMENT.match(words[0]):
        words.pop(0)
    return words


# --- dvc.yaml against the declaration, the CLI, the repository and params.yaml (no DVC run) ---

@pytest.mark.unit
def test_committed_dvc_yaml_is_written_from_the_declaration() -> None:
    assert DVC_FILE.read_text() == dvc_yaml(), "run `make dvc-yaml` and commit dvc.yaml"
    assert dvc_stages.main(["--check"]) == 0


@pytest.mark.unit
def test_the_staleness_check_fails_on_a_hand_edited_dvc_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    edited = tmp_path / "dvc.yaml"
    edited.write_text(DVC_FILE.read_text().replace("- seed\n", "", 1))
    monkeypatch.setattr(dvc_stages, "DVC_FILE", edited)
    assert dvc_stages.main(["--check"]) == 1


@pytest.mark.unit
def test_every_stage_runs_an_existing_mlops_command_and_each_step_its_own() -> None:
    for name, stage in stages().items():
        words = argv(stage)
        assert command_problem(words, REPO_ROOT) is None, f"stage {name}: {command_problem(words, REPO_ROOT)}"
        if name != "generate":  # the raw data; every other stage is one pipeline step
            assert words[:3] == ["mlops", "step", name], f"stage {name} runs {words[:3]}"
            assert "MLOPS_PARAMS_FILE=params.yaml" in stage["cmd"], f"stage {name} does not read params.yaml"


@pytest.mark.unit
def test_stage_deps_exist_and_params_are_settings_in_params_yaml() -> None:
    missing = sorted(dep for dep in repository_deps() if not (REPO_ROOT / dep).is_file())
    assert not missing, f"dvc.yaml deps missing from the repository: {missing}"
    values = params()
    for name, stage in stages().items():
        listed = set(stage.get("params", []))
        assert listed <= set(values), f"stage {name} lists params not in params.yaml: {listed - set(values)}"
        templated = set(TEMPLATE.findall(stage["cmd"]))
        assert templated <= listed, f"stage {name} uses {templated - listed} without listing it as a param"
    for out in stage_outputs():
        assert out.startswith(".mlops/dvc/"), f"{out}: stage outputs live in .mlops/dvc/"


@pytest.mark.unit
def test_params_yaml_holds_only_setting_defaults_that_a_stage_lists() -> None:
    values = params()
    used = {param for stage in stages().values() for param in stage.get("params", [])}
    assert set(values) == used, f"in params.yaml but no stage lists it: {set(values) - used}"
    from_file = PipelineSettings(**values)  # keyword arguments win over any MLOPS_* variable of this shell
    for name in values:
        default = PipelineSettings.model_fields[name].default
        assert getattr(from_file, name) == default, f"{name} differs from its default"


# --- the step commands' own refusals and the deploy rule (no MLflow needed) ---

@pytest.mark.unit
def test_a_step_without_its_input_record_exits_2_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "records" / "ingest.json"
    result = runner.invoke(app, ["step", "validate", "--snapshot", str(tmp_path / "s.parquet"),
                                 "--ingested", str(missing), "--report", str(tmp_path / "report")])
    assert result.exit_code == 2
    assert f"no step record {missing}" in result.output
    assert "Traceback" not in result.output


@pytest.mark.unit
def test_a_step_given_a_record_of_another_home_exits_2_naming_the_run(
        settings: PipelineSettings, tmp_path: Path) -> None:
    ingested = tmp_path / "records" / "ingest.json"
    write_record(ingested, IngestRecord(run_id="0123456789abcdef0123456789abcdef", dataset_sha256="0" * 64))
    result = runner.invoke(app, ["step", "preprocess", "--snapshot", str(tmp_path / "snapshot"),
                                 "--ingested", str(ingested), "--train", str(tmp_path / "train"),
                                 "--validation", str(tmp_path / "validation"), "--test", str(tmp_path / "test")])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())
    assert "MLflow run 0123456789abcdef0123456789abcdef is not in the tracking store sqlite:///" in line
    assert "Traceback" not in result.output
    assert not (tmp_path / "train").exists()


@pytest.mark.unit
def test_deploy_leaves_the_alias_alone_when_evaluate_rejected(tmp_path: Path) -> None:
    evaluated, deployed = tmp_path / "evaluate.json", tmp_path / "deploy.json"
    write_record(evaluated, EvaluateRecord(run_id="r1", version="3", decision="reject",
                                           reason="F1 0.40 does not beat production 0.41 + margin 0.02",
                                           production_version_at_evaluation="2"))
    # No tracking store is configured here: touching the registry would fail the command.
    result = runner.invoke(app, ["step", "deploy", "--evaluated", str(evaluated), "--record", str(deployed)],
                           env={"MLOPS_TRACKING_URI": "http://127.0.0.1:9"})
    assert result.exit_code == 0, result.output
    assert "version 3 not promoted" in result.output
    assert read_record(deployed, DeployRecord) == DeployRecord(run_id="r1", version="3", promoted=False)


# --- `dvc repro` in a copy of the project ---

def copy_project(target: Path) -> None:
    """What a clone holds that the stages read: dvc.yaml, params.yaml, DVC's config, the deps."""
    for relative in (*PROJECT_FILES, *sorted(repository_deps())):
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / relative, target / relative)
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)


def set_params(project: Path, **changes: Any) -> None:
    path = project / "params.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **changes}))


def dvc(project: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(VENV_BIN / "dvc"), *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"dvc {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def ran(output: str) -> list[str]:
    return STAGE_RUN.findall(output)


def logged(home: Path, run_id: str) -> RunData:
    """What one MLflow run in the registry under ``home`` logged: its metrics and params."""
    store = registry.client(Settings(home=home, tracking_uri=None, registry_uri=None))  # sets no global URI
    return store.get_run(run_id).data


def serving_version(home: Path) -> str | None:
    """The version holding the serving alias in the registry under ``home``."""
    return registry.alias_version(Settings(home=home, tracking_uri=None, registry_uri=None))


def assert_deploy_followed_evaluate(records: Path, home: Path, serving_before: str | None) -> None:
    """Deploy moved the serving alias to the evaluated version exactly when evaluate said promote."""
    evaluated = read_record(records / "evaluate.json", EvaluateRecord)
    deployed = read_record(records / "deploy.json", DeployRecord)
    promoted = evaluated.decision == "promote"
    assert (deployed.version, deployed.promoted) == (evaluated.version, promoted)
    assert serving_version(home) == (evaluated.version if promoted else serving_before)


@pytest.mark.e2e
def test_dvc_repro_runs_every_stage_then_nothing_then_only_what_a_param_touches(tmp_path: Path) -> None:
    # Its own runs from an empty home, not a shared home: what `dvc repro` runs and records is the subject.
    project, home = tmp_path / "project", tmp_path / "home"
    copy_project(project)
    set_params(project, demo_rows=2_000)  # seed 42: frauds in all three splits
    # The family comes from the contract alone: params.yaml leaves it null and no MLOPS_* variable names
    # it, so each stage process finds it in the file dvc.yaml lists (the copy's, not the package's).
    contract = project / BUNDLED_CONTRACT_PATH
    raw = yaml.safe_load(contract.read_text())
    raw["model"] = {"family": "xgboost", "params": {"n_estimators": 40}, "calibration": "platt"}
    contract.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLOPS_")}
    env.update(PATH=f"{VENV_BIN}{os.pathsep}{env['PATH']}", MLOPS_HOME=str(home), DVC_NO_ANALYTICS="1",
               MLOPS_CONTRACT_PATH=str(contract))
    records = project / ".mlops" / "dvc" / "records"

    assert ran(dvc(project, env, "repro")) == list(stages())
    metrics = json.loads((project / ".mlops/dvc/evaluate/evaluation/metrics.json").read_text())
    precision, recall = metrics["test_precision"], metrics["test_recall"]
    assert metrics["test_f1"] == pytest.approx(2 * precision * recall / (precision + recall))
    assert (project / ".mlops/dvc/evaluate/evaluation/pr_curve.csv").read_text().startswith("recall,precision")
    evaluated = read_record(records / "evaluate.json", EvaluateRecord)
    assert evaluated.version == "1"
    # DVC's metrics file holds what the evaluate run logged to MLflow.
    run = logged(home, evaluated.run_id)
    assert {key: run.metrics.get(key) for key in metrics} == pytest.approx(metrics)
    # The registered version is the contract's family, trained with its params and calibration.
    assert (run.params["model_family"], run.params["calibration_setting"], run.params["calibration"]) == \
        ("xgboost", "platt", "platt")
    assert '"n_estimators": 40' in run.params["model_params"]
    assert_deploy_followed_evaluate(records, home, serving_before=None)
    trained, serving = (records / "train.json").read_text(), serving_version(home)

    assert ran(dvc(project, env, "repro")) == []
    assert json.loads(dvc(project, env, "status", "--json")) == {}

    # An evaluate setting: evaluate reruns, and deploy, which reads its decision; nothing upstream.
    set_params(project, promotion_margin=0.9)
    assert json.loads(dvc(project, env, "status", "--json")) == {
        "evaluate": [{"changed deps": {"params.yaml": {"promotion_margin": "modified"}}}]}
    assert ran(dvc(project, env, "repro")) == ["evaluate", "deploy"]
    assert (records / "train.json").read_text() == trained  # the same model run: train did not run
    assert read_record(records / "evaluate.json", EvaluateRecord).version == "2"
    assert_deploy_followed_evaluate(records, home, serving_before=serving)

    assert "pushed" in dvc(project, env, "push")
    assert any(path.is_file() for path in (project / ".mlops" / "dvc-remote").rglob("*")), "nothing pushed"
