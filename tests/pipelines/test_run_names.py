"""The MLflow runs list says which run promoted which version: after evaluate decides, the pipeline's
run is named ``<pipeline> v<version> <decision>`` and holds the decision and the test metrics; the
experiment opens in MLflow's model-training layout, and the demo's link opens its runs list; the
version's reference profile records its threshold. The run writes MLflow's process-wide state (global
URIs, MLFLOW_HTTP_* limits) at most once: its steps share one registry client (mlops.registry_client)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import mlflow
import pytest
from mlflow_writes import MlflowGlobalWrites
from rich.console import Console

from mlops import registry
from mlops.data.generator import generate_transactions
from monitoring.estimated_quality import reference_estimate
from monitoring.references import fetch_profile
from pipelines.demo import print_next_steps
from pipelines.orchestration.runner import run_pipeline
from pipelines.settings import PipelineSettings
from pipelines.steps.deploy import MAX_VERSION_TAGS
from pipelines.steps.evaluate import EvaluationReport

pytestmark = pytest.mark.integration


def test_an_inline_run_is_named_after_its_outcome_and_holds_the_decision_and_test_metrics(
        mlflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        mlflow_global_writes: MlflowGlobalWrites) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "2")
    settings = PipelineSettings()
    source = tmp_path / "transactions.parquet"
    generate_transactions(3000, seed=7, fraud_rate=0.08).to_parquet(source, index=False)
    outcome = run_pipeline(str(source), settings, run_name="named-after-outcome", runner="inline")
    assert mlflow_global_writes.uri_calls["set_tracking_uri"] <= 1, mlflow_global_writes  # was 16 per run
    assert mlflow_global_writes.most <= 1, mlflow_global_writes
    assert outcome.version == "1"
    assert outcome.decision in {"promote", "reject"}  # 2 epochs may miss the quality gates
    client = registry.client(settings)
    experiment = registry.ensure_experiment(settings)
    name = f"{settings.pipeline_name} v1 {outcome.decision}"
    runs = client.search_runs([experiment], filter_string=f"attributes.run_name = '{name}'")
    assert [r.info.run_id for r in runs] == [outcome.run_id]
    run = runs[0]
    assert run.data.tags["decision"] == outcome.decision
    assert run.data.tags["registered_version"] == "1"
    assert "mlflow.parentRunId" not in run.data.tags  # the run the list shows, not a nested one
    assert 0.0 <= run.data.metrics["test_f1"] <= 1.0
    assert 0.0 < run.data.metrics["test_pr_auc"] <= 1.0
    # Nothing is left under the name the runner gave it.
    assert client.search_runs([experiment], filter_string="attributes.run_name = 'named-after-outcome'") == []
    # The registered version carries the few tags a person reads; its card links the pictures.
    version = client.get_model_version(settings.model_name, "1")
    assert len(version.tags) <= MAX_VERSION_TAGS
    assert version.tags["decision"] == outcome.decision
    link = f"[pr_curve.png](#/experiments/{experiment}/runs/{outcome.run_id}/artifactPath/evaluation/pr_curve.png)"
    assert link in str(version.description)
    artifacts = {a.path for a in client.list_artifacts(outcome.run_id, "evaluation")}
    assert {"evaluation/pr_curve.png", "evaluation/report.json"} <= artifacts
    tags = client.get_experiment(experiment).tags
    assert tags[registry.EXPERIMENT_KIND_TAG] == "custom_model_development"
    # The saved runs view the printed link opens shows the outcome and the test metrics as columns.
    view = json.loads(tags[registry.RUNS_VIEW_TAG])
    shown = {column.split(".", 1)[1].strip("`") for column in view["selectedColumns"]}
    assert {"decision", "test_f1", "test_pr_auc"} <= shown
    # The drift job's reference holds the version's threshold, so its quality can be estimated without labels.
    report = EvaluationReport.model_validate_json(
        Path(mlflow.artifacts.download_artifacts(run_id=outcome.run_id, artifact_path="evaluation/report.json",
                                                 dst_path=str(tmp_path / "report"))).read_text())
    profile = fetch_profile(settings, settings.model_name, "1")
    assert profile.threshold == report.candidate.threshold
    assert reference_estimate(profile) is not None


def test_the_demo_links_the_experiments_runs_list(settings: PipelineSettings) -> None:
    console = Console(record=True, width=400)
    print_next_steps(console, settings)
    output = console.export_text()
    experiment = registry.ensure_experiment(settings)
    link = re.search(r"then open (\S+)\)", output)
    assert link is not None, output
    assert link.group(1) == (f"http://127.0.0.1:5000/#/experiments/{experiment}/runs"
                             f"?viewStateShareKey={registry.RUNS_VIEW_KEY}&compareRunsMode=TABLE")
