"""Records, not tags: what the runner reports and what a step decides on comes from the steps' typed
records; MLflow tags are written for people and the UI only. A finished run whose every tag (runs,
model versions, registered model) is deleted from the real SQLite store reports the same outcome, and
no step or runner module reads a tag."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mlops import registry
from mlops.data.generator import generate_transactions
from mlops.settings import Settings
from pipelines.orchestration.records import DeployRecord, EvaluateRecord
from pipelines.orchestration.run_records import RunRecords
from pipelines.orchestration.runner import read_outcome, run_pipeline
from pipelines.settings import PipelineSettings

REPO = Path(__file__).resolve().parents[2]
# Modules that decide: the steps, the runners, the training. Nothing in them may read a tag.
DECIDING = ("pipelines/orchestration", "pipelines/steps", "pipelines/training")
# Display only: a tag read there is shown to a person, never decided on.
DISPLAY_ONLY = {"pipelines/training/command.py"}  # reproduce prints the original's ONNX hash beside the new one


def delete_every_tag(settings: Settings) -> int:
    """Delete every tag of every run, model version and registered model in the store; how many."""
    client = registry.client(settings)
    deleted = 0
    experiments = [e.experiment_id for e in client.search_experiments()]
    for run in client.search_runs(experiments):
        for key in run.data.tags:
            client.delete_tag(run.info.run_id, key)
            deleted += 1
    for model in client.search_registered_models():
        for key in model.tags:
            client.delete_registered_model_tag(model.name, key)
            deleted += 1
        for version in client.search_model_versions(f"name = '{model.name}'"):
            for key in version.tags:
                client.delete_model_version_tag(model.name, version.version, key)
                deleted += 1
    return deleted


def test_a_finished_run_reports_the_same_outcome_with_every_tag_deleted(
        mlflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "2")
    settings = PipelineSettings()
    source = tmp_path / "transactions.parquet"
    generate_transactions(3000, seed=7, fraud_rate=0.08).to_parquet(source, index=False)
    outcome = run_pipeline(str(source), settings, run_name="untagged", runner="inline")
    records = RunRecords.of(settings, "untagged")
    evaluated = records.record("evaluate", EvaluateRecord)
    deployed = records.record("deploy", DeployRecord)

    assert delete_every_tag(settings) > 0
    client = registry.client(settings)
    run = client.get_run(outcome.run_id)
    assert run.data.tags == {}  # MLflow's own mlflow.* tags too: deleting them breaks nothing here
    assert client.get_model_version(settings.model_name, "1").tags == {}

    assert read_outcome(settings, "untagged") == outcome
    assert records.record("evaluate", EvaluateRecord) == evaluated
    assert records.record("deploy", DeployRecord) == deployed
    assert evaluated is not None
    assert (outcome.decision, outcome.version) == (evaluated.decision, evaluated.version)
    assert evaluated.production_version_at_evaluation is None  # the first version: nothing to compare with
    if outcome.decision == "promote":  # 2 epochs may miss the quality gates
        assert deployed is not None
        assert (deployed.rollout, deployed.production_version) == ("first", outcome.production_version)
    else:
        assert deployed is None


def _tag_reads(path: Path) -> list[int]:
    """Lines of ``path`` that read a tag: ``x.tags`` (``.get``, ``[...]``, iterated) or ``get_tag(...)``."""
    nodes = ast.walk(ast.parse(path.read_text()))
    return sorted(node.lineno for node in nodes
                  if (isinstance(node, ast.Attribute) and node.attr == "tags" and isinstance(node.ctx, ast.Load))
                  or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr == "get_tag"))


def test_no_step_runner_or_training_module_reads_a_tag() -> None:
    reads = {f"{path.relative_to(REPO)}:{line}"
             for folder in DECIDING for path in sorted((REPO / folder).rglob("*.py"))
             if str(path.relative_to(REPO)) not in DISPLAY_ONLY for line in _tag_reads(path)}
    assert reads == set(), "a step decides from a tag; read its record (pipelines/orchestration/records.py)"


def test_the_guard_sees_a_tag_read(tmp_path: Path) -> None:
    module = tmp_path / "deciding.py"
    module.write_text("def decide(run):\n    return run.data.tags.get('decision')\n\n"
                      "def also(version):\n    return version.tags['x'], client.get_tag('y')\n")
    assert _tag_reads(module) == [2, 5, 5]
