"""The drift job as a KFP component: it compiles, and its body is the same job (an empty log is refused)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mlops.errors import EmptyWindowError
from monitoring.kfp_component import compile_drift_pipeline, drift_check

pytestmark = pytest.mark.unit


def test_the_drift_pipeline_compiles_with_the_component(tmp_path: Path) -> None:
    spec = yaml.safe_load(compile_drift_pipeline(tmp_path / "drift.yaml").read_text())
    assert "comp-drift-check" in spec["components"]
    assert spec["root"]["inputDefinitions"]["parameters"]["since_hours"]["defaultValue"] == 1.0


def test_the_component_body_runs_the_drift_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path))
    with pytest.raises(EmptyWindowError, match="no predictions logged"):
        drift_check.python_func(since_hours=1.0, last=0)
