"""Fixtures of the core's tests: settings on an empty MLflow store, a home for CLI runs and one
local SparkSession for the whole session."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mlops.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture
def settings(mlflow_home: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings on an empty, migrated MLflow store, with MLOPS_HOME set for the CLI to find it too."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLOPS_HOME", str(mlflow_home))
    return Settings()


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """MLOPS_HOME set to tmp_path/home, not created: a command creates only what it needs."""
    home = tmp_path / "home"
    monkeypatch.setenv("MLOPS_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession (two cores, no UI, one shuffle partition). Its Python workers run this
    interpreter, so they import the project (Spark would start `python3`)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # read once, when the context starts
    session = (SparkSession.builder.master("local[2]").appName("mlops-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
