"""The pipeline definition: committed IR YAML is current, and its shape is the seven steps with the
deploy step behind the evaluation condition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pipelines.orchestration.kfp_pipeline import COMPILED_PIPELINE, compile_pipeline

pytestmark = pytest.mark.unit

STEPS = {"ingest", "validate", "preprocess", "train", "export", "evaluate", "deploy"}


def _pipeline_spec() -> dict[str, Any]:
    """The IR's first document; the second holds the Kubernetes platform settings (pipelines/cluster.py)."""
    spec: dict[str, Any] = next(yaml.safe_load_all(COMPILED_PIPELINE.read_text()))
    return spec


def test_committed_pipeline_yaml_is_current(tmp_path: Path) -> None:
    fresh = compile_pipeline(tmp_path / "pipeline.yaml").read_text()
    assert fresh == COMPILED_PIPELINE.read_text(), "run `make compile` and commit pipelines/training_pipeline.yaml"


def test_pipeline_has_seven_steps_and_deploy_is_conditional() -> None:
    spec = _pipeline_spec()
    root_tasks = spec["root"]["dag"]["tasks"]
    condition = root_tasks["condition-1"]
    assert set(root_tasks) == (STEPS - {"deploy"}) | {"condition-1"}
    expected = "inputs.parameter_values['pipelinechannel--evaluate-Output'] == 'promote'"
    assert condition["triggerPolicy"]["condition"] == expected
    assert set(spec["components"]["comp-condition-1"]["dag"]["tasks"]) == {"deploy"}
    executors = spec["deploymentSpec"]["executors"]
    assert {name.removeprefix("exec-") for name in executors} == STEPS
    for executor in executors.values():
        # No run-time pip installs: the image carries the platform.
        assert "pip install" not in " ".join(executor["container"]["command"])


def test_no_step_reuses_cached_results() -> None:
    spec = _pipeline_spec()
    tasks = dict(spec["root"]["dag"]["tasks"]) | spec["components"]["comp-condition-1"]["dag"]["tasks"]
    for name, task in tasks.items():
        if name.startswith("condition"):
            continue
        assert task["cachingOptions"] == {}, name


def test_export_sits_between_train_and_evaluate() -> None:
    tasks = _pipeline_spec()["root"]["dag"]["tasks"]
    assert tasks["export"]["inputs"]["artifacts"]["model"]["taskOutputArtifact"]["producerTask"] == "train"
    evaluate_inputs = tasks["evaluate"]["inputs"]
    assert evaluate_inputs["artifacts"]["model"]["taskOutputArtifact"]["producerTask"] == "export"
    # The model URI travels in export's record.
    assert evaluate_inputs["artifacts"]["exported"]["taskOutputArtifact"]["producerTask"] == "export"
