"""The inline runner (the pipeline's steps in this process) fails as kfp.local does: the failed step
named, each step reported, nothing registered, the steps' lines in the run's log file.

That both runners reach the same outcome on the same data is shown end to end in
tests/e2e/test_pipeline_e2e.py (the rerun through the inline runner matches the kfp.local run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops import registry
from mlops.data.generator import generate_transactions
from mlops.errors import PipelineError
from pipelines.orchestration.progress import StepReport
from pipelines.orchestration.runner import run_log_path, run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration


def test_a_failed_step_stops_the_inline_run_names_the_step_and_registers_nothing(
        mlflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    settings = PipelineSettings()
    frame = generate_transactions(600, seed=5)
    frame.loc[frame.index[:3], "is_fraud"] = 2
    source = tmp_path / "label-out-of-range.parquet"
    frame.to_parquet(source, index=False)
    steps: list[StepReport] = []
    with pytest.raises(PipelineError) as failure:
        run_pipeline(str(source), settings, run_name="inline-bad-label", runner="inline", on_step=steps.append)
    assert failure.value.step == "validate"
    assert "is_fraud" in failure.value.message
    assert [(s.step, s.succeeded) for s in steps] == [("ingest", True), ("validate", False)]
    assert steps[0].figure.startswith("600 rows, sha256 ")
    assert registry.list_versions(settings) == []
    run = registry.client(settings).search_runs(
        [registry.ensure_experiment(settings)], filter_string="attributes.run_name = 'inline-bad-label'")[0]
    assert run.data.tags["failed_step"] == "validate"
    assert run.info.status == "FAILED"
    log = run_log_path(settings, "inline-bad-label").read_text()
    assert "Task 'validate' finished with status FAILURE" in log
    assert "Executing task 'preprocess'" not in log
