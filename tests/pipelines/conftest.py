"""Fixtures of the pipeline tests: one MLflow home per module for the CLI runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, new_mlflow_home: Callable[[Path], Path]) -> Iterator[Path]:
    """A fresh migrated MLflow store as MLOPS_HOME for every test of one module (MLflow's process-wide
    URIs are unset after each module by tests/conftest.py)."""
    path = new_mlflow_home(tmp_path_factory.mktemp("home"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_HOME", str(path))
        yield path
