"""A pipeline run with MLOPS_MODEL_FAMILY=xgboost (issue 40): it registers a version whose ONNX file the
service answers from, records the family in MLflow and the run's name; an estimator skl2onnx cannot
convert stops the run at export, one line, nothing registered."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from mlops import registry
from mlops.contract import load_contract
from mlops.data.generator import generate_transactions
from mlops.errors import PipelineError
from pipelines.demo_replay import request_body
from pipelines.orchestration.runner import run_pipeline
from pipelines.settings import PipelineSettings
from serving.app import create_app
from serving.settings import ServingSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "transactions.parquet"
    generate_transactions(3000, seed=7, fraud_rate=0.08).to_parquet(path, index=False)
    return path


@pytest.mark.timeout(300)
def test_an_xgboost_run_registers_a_version_the_service_answers(
        mlflow_home: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    monkeypatch.setenv("MLOPS_ROLLOUT", "direct")
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "xgboost")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"n_estimators": 80}')
    settings = PipelineSettings()
    outcome = run_pipeline(str(source), settings, run_name="xgboost-run", runner="inline")
    assert outcome.version == "1"
    assert outcome.decision == "promote", outcome
    run = registry.client(settings).get_run(outcome.run_id)
    assert run.data.params["model_family"] == "xgboost"
    assert '"n_estimators": 80' in run.data.params["model_params"]
    assert run.data.tags["mlflow.runName"] == f"{settings.pipeline_name} v1 xgboost promote"
    card = registry.client(settings).get_model_version(settings.model_name, "1").description
    assert "- family: `xgboost`, parameters `" in str(card)

    contract = load_contract(settings.contract_path)
    rows = pd.read_parquet(source).tail(5)
    with TestClient(create_app(ServingSettings())) as client:
        assert client.get("/healthz").json()["model_version"] == "1"
        answers = [client.post("/predict", json=request_body(row, contract)) for _, row in rows.iterrows()]
    assert [a.status_code for a in answers] == [200] * len(rows), answers[0].text
    for answer in (a.json() for a in answers):
        assert answer["model_version"] == "1"
        assert 0.0 <= answer["probability"] <= 1.0
        assert answer["decision"] in {contract.decisions.positive, contract.decisions.negative}


@pytest.mark.timeout(300)
def test_an_estimator_skl2onnx_cannot_convert_stops_the_run_at_export_and_registers_nothing(
        mlflow_home: Path, source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    monkeypatch.setenv("MLOPS_MODEL_FAMILY", "sklearn")
    monkeypatch.setenv("MLOPS_MODEL_PARAMS", '{"estimator": "sklearn.semi_supervised.LabelSpreading", '
                                             '"kernel": "knn"}')
    settings = PipelineSettings()
    with pytest.raises(PipelineError, match="skl2onnx cannot convert") as caught:
        run_pipeline(str(source), settings, run_name="unconvertible", runner="inline")
    assert caught.value.step == "export"
    assert "\n" not in caught.value.message
    client = registry.client(settings)
    assert client.search_model_versions(f"name = '{settings.model_name}'") == []
