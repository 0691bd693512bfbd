"""The compiled training pipeline's tasks under the manifests' authentication rules
(infra/pipeline_auth.py, part of `make validate-infra`): the committed pipeline passes in every
overlay, and a task without its MLflow credentials, with a literal password or with a Secret the
manifests never use fails the check and `python -m infra.validate`."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import validate
from infra.manifests import INFRA_DIR, OVERLAYS
from infra.pipeline_auth import load_compiled, pipeline_problems, task_pods, task_problems
from pipelines.cluster import PIPELINE_NAMESPACE, TRACKING_SECRET
from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE

pytestmark = pytest.mark.integration

Objects = list[dict[str, Any]]


def _pods(edit: Any = None) -> Objects:
    pipeline, kubernetes = load_compiled(COMPILED_PIPELINE)
    kubernetes = copy.deepcopy(kubernetes)
    if edit is not None:
        edit(pipeline, kubernetes)
    return task_pods(pipeline, kubernetes, PIPELINE_NAMESPACE)


def _write(tmp_path: Path, edit: Any) -> Path:
    pipeline, platform = yaml.safe_load_all(COMPILED_PIPELINE.read_text())
    edit(pipeline, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"])
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump_all([pipeline, platform]))
    return path


def _drop_secret(_pipeline: dict[str, Any], kubernetes: dict[str, Any]) -> None:
    del kubernetes["exec-evaluate"]["secretAsEnv"]


def test_the_paths_of_the_compiled_pipeline_agree() -> None:
    assert validate.COMPILED_PIPELINE == COMPILED_PIPELINE


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_task_of_the_committed_pipeline_passes(built: dict[str, Objects], overlay: str) -> None:
    pods = _pods()
    assert len(pods) == 7
    assert task_problems(built[overlay], pods) == []
    assert pipeline_problems(built[overlay], COMPILED_PIPELINE, PIPELINE_NAMESPACE) == []


def test_a_task_without_its_credentials_fails(built: dict[str, Objects]) -> None:
    problems = task_problems(built["prod"], _pods(_drop_secret))
    assert problems == [
        "Pod/team-fraud/pipeline-task-evaluate container main: talks to MLflow without MLOPS_TRACKING_USERNAME "
        "from a Secret",
        "Pod/team-fraud/pipeline-task-evaluate container main: talks to MLflow without "
        "MLOPS_TRACKING_PASSWORD(_FILE) from a Secret"]


def test_a_literal_password_fails(built: dict[str, Objects]) -> None:
    def literal(pipeline: dict[str, Any], kubernetes: dict[str, Any]) -> None:
        kubernetes["exec-deploy"]["secretAsEnv"][0]["keyToEnv"].pop()  # the password no longer from the Secret
        pipeline["deploymentSpec"]["executors"]["exec-deploy"]["container"]["env"] = [
            {"name": "MLOPS_TRACKING_PASSWORD", "value": "hunter2"}]

    problems = task_problems(built["prod"], _pods(literal))
    assert any("pipeline-task-deploy container main: MLOPS_TRACKING_PASSWORD is inline" in p for p in problems)
    assert any("pipeline-task-deploy container main: talks to MLflow without MLOPS_TRACKING_PASSWORD" in p
               for p in problems)


def test_a_secret_the_manifests_never_read_fails(built: dict[str, Objects]) -> None:
    def misspelt(_pipeline: dict[str, Any], kubernetes: dict[str, Any]) -> None:
        kubernetes["exec-train"]["secretAsEnv"][0]["secretNameParameter"]["runtimeValue"]["constant"] = "mlflow-admn"

    problems = task_problems(built["prod"], _pods(misspelt))
    assert problems == [
        f"Pod/team-fraud/pipeline-task-train: Secret mlflow-admn key {key} is not one the manifests read in "
        "team-fraud (infra/README.md lists the Secrets to create)" for key in ("username", "password")]
    assert any(ref == (PIPELINE_NAMESPACE, TRACKING_SECRET) for ref in
               {(pod["metadata"].get("namespace"), variable["valueFrom"]["secretKeyRef"]["name"])
                for pod in [obj for obj in built["prod"] if obj["kind"] == "TrainJob"]
                for variable in pod["spec"]["trainer"]["env"] if "secretKeyRef" in variable.get("valueFrom", {})})


def test_without_the_pipeline_config_no_task_reaches_mlflow(built: dict[str, Objects]) -> None:
    objects = [obj for obj in built["prod"] if obj["metadata"].get("name") != "pipeline-config"]
    problems = task_problems(objects, _pods())
    assert len(problems) == 7
    assert all("no MLOPS_TRACKING_URI naming the platform's MLflow" in problem for problem in problems)


def test_validate_infra_fails_on_a_pipeline_missing_credentials(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    broken = _write(tmp_path, _drop_secret)
    assert validate.main(["--pipeline", str(broken), str(INFRA_DIR / "overlays" / "prod")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL")
    assert "pipeline.yaml: Pod/team-fraud/pipeline-task-evaluate container main: talks to MLflow without" in out
    assert validate.main(["--pipeline", str(COMPILED_PIPELINE), str(INFRA_DIR / "overlays" / "prod")]) == 0
