"""MLOPS_MODEL_FAMILY=torch with a module that does not import stops the run at the train step in one line,
exit code 2, nothing registered. A user's module through the whole pipeline on both bundled examples:
tests/e2e/test_families_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops import registry
from mlops.data.generator import generate_transactions
from mlops.errors import PipelineError
from pipelines.orchestration.runner import run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration



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
