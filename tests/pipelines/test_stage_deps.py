"""A stage's code deps and params are derived from its step's code: the train stage lists every
repository module the train step imports (checked against what Python itself loads), and in a git +
DVC copy an edit to any of them, or to one of its params, makes real DVC report the stage stale."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.orchestration.declaration import step_named
from pipelines.orchestration.dvc_stages import artifact_path, record_path, stage
from pipelines.orchestration.stage_deps import REPO, code_deps, params
from pipelines.training.trainer import TrainParams

pytestmark = pytest.mark.integration

TRAIN = step_named("train")
VENV_BIN = Path(sys.executable).parent
# Where the training runs, not what it computes: not a stage param.
RUN_ENVIRONMENT = {"device", "compile_model"}
# Which model family trains, its own parameters and how its score is calibrated: train stage params
# beside the MLP's.
FAMILY_SETTINGS = {"model_family", "model_params", "calibration"}


def loaded_by_python(function: str) -> set[str]:
    """Repository files in sys.modules of a fresh interpreter that imported the step function's
    module and then every module the function imports in its body: Python's own transitive walk."""
    module, name = function.split(":")
    body = inspect.getsource(getattr(importlib.import_module(module), name))
    lazy = re.findall(r"^\s+from ([\w.]+) import", body, re.MULTILINE)
    script = (f"import importlib, json, sys\nfor m in {[module, *lazy]!r}: importlib.import_module(m)\n"
              "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True,
                          cwd=REPO, env={k: v for k, v in os.environ.items() if not k.startswith("MLOPS_")})
    files = {Path(f) for f in json.loads(done.stdout.splitlines()[-1]) if f}
    return {str(f.relative_to(REPO)) for f in files if f.is_relative_to(REPO) and ".venv" not in f.parts}


def test_the_train_stage_lists_every_repository_module_the_train_step_loads() -> None:
    derived = set(code_deps(TRAIN.function))
    loaded = loaded_by_python(TRAIN.function)
    assert {"pipelines/training/trainer.py", "pipelines/training/data.py", "pipelines/training/checkpoint.py",
            "pipelines/training/distributed.py", "pipelines/steps/calibration.py"} <= loaded
    assert loaded <= derived, f"imported but not a dep: {sorted(loaded - derived)}"
    assert all(not dep.startswith((".venv", "tests/")) for dep in derived)


def test_the_train_stage_params_are_its_parameter_records_fields_in_params_yaml() -> None:
    listed = params(TRAIN.function)
    assert set(listed) == (set(TrainParams.model_fields) - RUN_ENVIRONMENT) | FAMILY_SETTINGS
    assert params("pipelines.orchestration.tasks:export_task") == ["parity_tolerance"]
    assert params("pipelines.orchestration.tasks:deploy_task") == []


@pytest.fixture
def recorded_train_stage(tmp_path: Path) -> Path:
    """A git + DVC copy holding the train stage, its code and params, and stand-ins for the data it
    reads and writes, recorded in dvc.lock (`dvc commit`) as if it had run."""
    spec = stage(TRAIN)
    for relative in (*(d for d in spec["deps"] if not d.startswith(".mlops/")), "params.yaml"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / relative, tmp_path / relative)
    for split in ("train", "validation", "test"):
        (tmp_path / artifact_path("preprocess", split)).mkdir(parents=True)
        (tmp_path / artifact_path("preprocess", split) / "part.parquet").write_text(split)
    (tmp_path / artifact_path("train", "model")).mkdir(parents=True)
    (tmp_path / artifact_path("train", "model") / "model.pt").write_text("weights")
    for record in (record_path("ingest"), record_path("train")):
        (tmp_path / record).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / record).write_text("{}")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": spec}}, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc(tmp_path, "init", "-q")
    dvc(tmp_path, "commit", "-f", "-q", "train")
    return tmp_path


def dvc(project: Path, *args: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    done = subprocess.run([str(VENV_BIN / "dvc"), *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, f"dvc {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def stale(project: Path) -> dict[str, object]:
    """`dvc status` of the copy, through DVC's own API (one process, not one per edit)."""
    from dvc.repo import Repo

    with contextlib.chdir(project), Repo(str(project)) as repo:  # DVC reports paths relative to the cwd
        status: dict[str, object] = repo.status(targets=["train"])
    return status


def test_an_edit_to_any_module_the_train_step_imports_makes_its_stage_stale(recorded_train_stage: Path) -> None:
    project = recorded_train_stage
    assert json.loads(dvc(project, "status", "--json")) == {}
    modules = code_deps(TRAIN.function)
    for relative in modules:
        path = project / relative
        original = path.read_text()
        path.write_text(original + "\n# an edit\n")
        assert stale(project) == {"train": [{"changed deps": {relative: "modified"}}]}, relative
        path.write_text(original)
    assert stale(project) == {}
    params_file = project / "params.yaml"
    params_file.write_text(params_file.read_text().replace("negative_sample_rate: 1.0", "negative_sample_rate: 0.5"))
    assert json.loads(dvc(project, "status", "--json")) == {
        "train": [{"changed deps": {"params.yaml": {"negative_sample_rate": "modified"}}}]}
    assert len(modules) >= 30  # the trainer's whole closure, not the three files once hand-listed
