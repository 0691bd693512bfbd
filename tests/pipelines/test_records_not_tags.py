"""Records, not tags: what the runner reports and what a step decides on comes from the steps' typed
records; MLflow tags are written for people and the UI only. A finished run whose every tag (runs,
model versions, registered model) is deleted from the real SQLite store reports the same outcome, and
no step or runner module reads a tag."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from mlflow_tags import delete_every_tag
from typer.testing import CliRunner

from mlops import registry
from mlops.data.generator import generate_transactions
from mlops_cli.app import app
from pipelines.orchestration.records import DeployRecord, EvaluateRecord
from pipelines.orchestration.run_records import RunRecords
from pipelines.orchestration.runner import read_outcome, run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# Modules that decide: the steps, the runners, the training, the registry, serving and monitoring.
DECIDING = ("pipelines/orchestration", "pipelines/steps", "pipelines/training", "platform/mlops", "serving",
            "monitoring")
ALLOWED = {  # (module, function) that may read a tag, and why
    ("pipelines/training/command.py", "reproduce"),  # display: the original's ONNX hash beside the new one
    ("platform/mlops/registry.py", "ensure_experiment"),  # keeps the UI's saved runs view on the experiment
}


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
    listed = CliRunner().invoke(app, ["model", "list"])
    assert listed.exit_code == 0, listed.output

    assert delete_every_tag(settings) > 0
    client = registry.client(settings)
    run = client.get_run(outcome.run_id)
    assert run.data.tags == {}  # MLflow's own mlflow.* tags too: deleting them breaks nothing here
    assert client.get_model_version(settings.model_name, "1").tags == {}

    assert read_outcome(settings, "untagged") == outcome
    assert CliRunner().invoke(app, ["model", "list"]).output == listed.output
    assert outcome.decision in listed.output
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


def _tag_reads(path: Path) -> list[tuple[str, int]]:
    """(function, line) of each tag read in ``path``: ``x.tags`` (``.get``, ``[...]``, iterated) or ``get_tag()``."""
    reads = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            if ((isinstance(node, ast.Attribute) and node.attr == "tags" and isinstance(node.ctx, ast.Load))
                    or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "get_tag")):
                reads.append((function.name, node.lineno))
    return sorted(set(reads), key=lambda read: read[1])


def test_no_step_runner_registry_serving_or_monitoring_module_reads_a_tag() -> None:
    reads = {f"{module}:{line} in {function}"
             for folder in DECIDING for path in sorted((REPO / folder).rglob("*.py"))
             for module in [str(path.relative_to(REPO))]
             for function, line in _tag_reads(path) if (module, function) not in ALLOWED}
    assert reads == set(), "a step decides from a tag; read its record (pipelines/orchestration/records.py)"


def test_the_guard_sees_a_tag_read(tmp_path: Path) -> None:
    module = tmp_path / "deciding.py"
    module.write_text("def decide(run):\n    return run.data.tags.get('decision')\n\n"
                      "def also(version):\n    return version.tags['x'], client.get_tag('y')\n")
    assert _tag_reads(module) == [("decide", 2), ("also", 5)]
