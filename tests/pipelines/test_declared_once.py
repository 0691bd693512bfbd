"""A step added to the pipeline's one declaration reaches every runner with no other edit: the
compiled Kubeflow IR, the inline runner's run and the generated dvc.yaml.

The builders take the tuple of steps as an argument (the declaration's extension point), so the
no-op step joins the declared ones here without a file being changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops.data.generator import generate_transactions
from mlops.errors import PipelineError
from pipelines.orchestration.context import StepContext
from pipelines.orchestration.declaration import STEPS, Step, Takes
from pipelines.orchestration.dvc_stages import dvc_yaml
from pipelines.orchestration.kfp_pipeline import compile_pipeline
from pipelines.orchestration.progress import StepReport
from pipelines.orchestration.records import IngestRecord
from pipelines.orchestration.runner import run_log_path, run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration

SEEN: list[str] = []  # the ingest run ids the no-op step was handed


def noop_step(context: StepContext, *, ingested: IngestRecord) -> None:
    """Does nothing but remember the run it was handed."""
    SEEN.append(ingested.run_id)


NOOP = Step("noop", f"{__name__}:noop_step", "Does nothing; shows that a declared step reaches every runner.",
            takes=(Takes("ingested", "ingest"),))
WITH_NOOP = (STEPS[0], NOOP, *STEPS[1:])  # right after ingest


def test_a_declared_step_is_in_the_compiled_pipeline(tmp_path: Path) -> None:
    spec: dict[str, Any] = next(yaml.safe_load_all(compile_pipeline(tmp_path / "p.yaml", WITH_NOOP).read_text()))
    task = spec["root"]["dag"]["tasks"]["noop"]
    assert task["inputs"]["artifacts"]["ingested"]["taskOutputArtifact"] == {"outputArtifactKey": "record",
                                                                            "producerTask": "ingest"}
    assert task["cachingOptions"] == {}
    executor = spec["deploymentSpec"]["executors"]["exec-noop"]["container"]
    assert "run_task('noop', locals())" in " ".join(executor["command"])


def test_a_declared_step_is_a_stage_in_the_generated_dvc_yaml() -> None:
    stages = yaml.safe_load(dvc_yaml(WITH_NOOP))["stages"]
    assert list(stages) == ["generate", "ingest", "noop", "validate", "preprocess", "train", "export", "evaluate",
                            "deploy"]
    noop = stages["noop"]
    assert noop["cmd"] == "MLOPS_PARAMS_FILE=params.yaml mlops step noop --ingested .mlops/dvc/records/ingest.json"
    # Its record, then its code: this module and the repository modules it imports.
    assert noop["deps"][0] == ".mlops/dvc/records/ingest.json"
    assert {"tests/pipelines/test_declared_once.py", "pipelines/orchestration/declaration.py"} <= set(noop["deps"])
    assert "outs" not in noop  # it writes nothing


def test_a_declared_step_runs_in_the_inline_runner(mlflow_home: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    frame = generate_transactions(600, seed=5)
    frame.loc[frame.index[:3], "is_fraud"] = 2  # validate stops the run: the steps after it cost minutes
    source = tmp_path / "bad-label.parquet"
    frame.to_parquet(source, index=False)
    steps: list[StepReport] = []
    SEEN.clear()
    with pytest.raises(PipelineError, match="stopped at validate"):
        run_pipeline(str(source), PipelineSettings(), run_name="with-noop", runner="inline", on_step=steps.append,
                     steps=WITH_NOOP)
    assert [(s.step, s.succeeded) for s in steps] == [("ingest", True), ("noop", True), ("validate", False)]
    assert len(SEEN) == 1
    assert "Task 'noop' finished with status SUCCESS" in run_log_path(PipelineSettings(), "with-noop").read_text()
