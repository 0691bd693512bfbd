"""A pipeline run with MLOPS_MODEL_FAMILY=torch (issue 40): a data scientist's module from a test folder
registers a version the service answers from, `mlops predict` scoring a file as /predict does; a module
that does not import stops the run at the train step in one line, exit code 2, nothing registered."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import load_contract
from mlops.data.generator import generate_transactions
from mlops.errors import PipelineError
from mlops_cli.app import app
from pipelines.demo_replay import request_body
from pipelines.orchestration.runner import PipelineOutcome, run_pipeline
from pipelines.settings import PipelineSettings
from serving.app import create_app
from serving.settings import ServingSettings

pytestmark = pytest.mark.integration

USER_NETS = Path(__file__).parent / "training"  # user_nets.py: the module a data scientist would write
SAMPLE_ROWS = 200


@dataclass(frozen=True)
class TorchRun:
    settings: PipelineSettings
    outcome: PipelineOutcome


@pytest.fixture(scope="module")
def torch_run(new_mlflow_home: Callable[[Path], Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TorchRun]:
    folder = tmp_path_factory.mktemp("torch-run")
    path = folder / "transactions.parquet"
    generate_transactions(3000, seed=7, fraud_rate=0.08).to_parquet(path, index=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(USER_NETS))
        patch.setenv("MLOPS_HOME", str(new_mlflow_home(folder / "home")))
        patch.setenv("MLOPS_ROLLOUT", "direct")
        patch.setenv("MLOPS_MAX_EPOCHS", "3")
        patch.setenv("MLOPS_MODEL_FAMILY", "torch")
        patch.setenv("MLOPS_MODEL_PARAMS", json.dumps({"module": "user_nets:Wide", "hidden": 16}))
        settings = PipelineSettings()
        yield TorchRun(settings, run_pipeline(str(path), settings, run_name="torch-run", runner="inline"))


@pytest.mark.timeout(300)
def test_a_torch_run_registers_a_version_that_serves_as_mlops_predict_scores(torch_run: TorchRun,
                                                                            tmp_path: Path) -> None:
    settings, outcome = torch_run.settings, torch_run.outcome
    assert outcome.version == "1"
    run = registry.client(settings).get_run(outcome.run_id)
    assert (run.data.params["model_family"], run.data.params["model_architecture"]) == ("torch", "user_nets:Wide")
    assert run.data.params["calibration"] in {"none", "platt", "isotonic"}
    contract = load_contract(settings.contract_path)
    frame = generate_transactions(SAMPLE_ROWS, seed=77)
    for column in (contract.id_column, *(e.join_key for e in contract.entities)):
        frame[column] = "batch-" + frame[column].astype(str)
    path = tmp_path / "sample.parquet"
    frame.to_parquet(path, index=False)
    result = CliRunner().invoke(app, ["predict", str(path), "--out", str(tmp_path / "scored.parquet")])
    assert result.exit_code == 0, result.output
    scored = pd.read_parquet(tmp_path / "scored.parquet").set_index(contract.id_column)
    with TestClient(create_app(ServingSettings())) as client:
        ordered = frame.sort_values([contract.timestamp_column, contract.id_column])
        answers = {row[contract.id_column]: client.post("/predict", json=request_body(row, contract)).json()
                   for _, row in ordered.iterrows()}
    ids = list(answers)
    assert {answers[i]["model_version"] for i in ids} == {"1"}
    probability = np.array([answers[i]["probability"] for i in ids])
    assert np.abs(scored.loc[ids, "probability"].to_numpy() - probability).max() <= 1e-6


@pytest.mark.timeout(300)
def test_a_module_that_does_not_import_stops_the_run_at_train(
        mlflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "transactions.parquet"
    generate_transactions(3000, seed=7, fraud_rate=0.08).to_parquet(source, index=False)
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "torch")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"module": "my_models.nets:Wide"}')
    settings = PipelineSettings()
    with pytest.raises(PipelineError, match=r"torch module 'my_models\.nets:Wide' does not import") as caught:
        run_pipeline(str(source), settings, run_name="no-module", runner="inline")
    assert caught.value.step == "train"
    assert caught.value.exit_code == 2
    assert "\n" not in caught.value.message
    assert registry.client(settings).search_model_versions(f"name = '{settings.model_name}'") == []
