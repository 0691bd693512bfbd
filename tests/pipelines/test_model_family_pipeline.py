"""An estimator skl2onnx cannot convert stops the pipeline at export, one line, nothing registered. Every
family's successful run, on both bundled examples: tests/e2e/test_families_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops import registry
from mlops.data.generator import generate_transactions
from mlops.errors import PipelineError
from pipelines.orchestration.runner import run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration



@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "transactions.parquet"
    generate_transactions(3000, seed=7, fraud_rate=0.08).to_parquet(path, index=False)
    return path


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
    assert caught.value.exit_code == 2  # a setting to change, as `mlops train` says it
    assert "\n" not in caught.value.message
    client = registry.client(settings)
    assert client.search_model_versions(f"name = '{settings.model_name}'") == []
