"""Fresh MLflow stores for tests: one migrated SQLite store per session, copied wherever a test needs one."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow SQLite store with every migration applied.

    A new store runs MLflow's alembic migrations (about 4 s here); a copy of this file opens in a
    fraction of a second. The Default experiment is removed, so each copy's first store creates
    its own with that store's artifact root, exactly as a brand-new database would.
    """
    from mlflow.tracking import MlflowClient

    db = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{db}").search_experiments()
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM experiments WHERE experiment_id = 0")
    connection.close()
    return db


def copy_mlflow_template(template: Path, home: Path) -> Path:
    """``home`` holding a fresh copy of the migrated store where Settings(home=...) looks for it."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, home / "mlflow.db")
    return home


@pytest.fixture
def mlflow_home(tmp_path: Path, mlflow_template: Path) -> Path:
    """tmp_path/home with an empty, migrated MLflow store (mlflow.db)."""
    return copy_mlflow_template(mlflow_template, tmp_path / "home")
