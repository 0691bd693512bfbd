"""Issue 30, acceptance 3: candidates that carry no better model never leave staging, in fact never
reach it. With the canary rollout on (the pipelines' default), a second run on the same data and a
run on shuffled labels are rejected by evaluate, so deploy starts no canary: no version on staging,
none on a canary share, production still the first run's, and the registry history holds only that
first move."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mlops import registry
from mlops.data.generator import generate_transactions
from mlops_cli.app import app
from pipelines.orchestration.runner import read_outcome, run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration


def test_same_data_and_shuffled_label_candidates_never_leave_staging(
        mlflow_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    monkeypatch.setenv("MLOPS_MAX_EPOCHS", "2")
    monkeypatch.setenv("MLOPS_ROLLOUT", "canary")
    settings = PipelineSettings()
    data = generate_transactions(3000, seed=7, fraud_rate=0.08)
    same, shuffled = tmp_path / "transactions.parquet", tmp_path / "shuffled.parquet"
    data.to_parquet(same, index=False)
    labels = np.random.default_rng(3).permutation(data["is_fraud"].to_numpy())
    data.assign(is_fraud=labels).to_parquet(shuffled, index=False)

    # Its own first run, not a shared home's: a registry's first version under the canary rollout is the subject.
    shown = CliRunner().invoke(app, ["pipeline", "run", str(same), "--runner", "inline", "--run-name", "first"])
    assert shown.exit_code == 0, shown.output
    closing = " ".join(shown.output.split()[-20:])
    assert "decision promote; version 1 now serves (the first version: no production model for a canary)" in closing
    first = read_outcome(settings, "first")
    assert (first.decision, first.version, first.production_version) == ("promote", "1", "1")
    moves = len(registry.history(settings))

    for name, source in (("same-data", same), ("shuffled-labels", shuffled)):
        outcome = run_pipeline(str(source), settings, run_name=name, runner="inline")
        assert outcome.decision == "reject", (name, outcome)
        assert outcome.rollout == ""  # deploy rolled nothing out: the closing line names the serving alias
        assert outcome.production_version == "1"
        assert registry.alias_version(settings, registry.STAGING_ALIAS) is None
        assert registry.canary(settings) is None
        assert len(registry.history(settings)) == moves
    versions = {row["version"]: row for row in registry.list_versions(settings)}
    assert set(versions) == {"1", "2", "3"}
