"""A local tracking store is created on purpose only: `mlops init` makes one, the pipeline refuses
a missing one before anything runs, and registry calls never create one silently."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlops import registry
from mlops.data.generator import generate_transactions
from mlops.errors import RegistryError
from mlops.settings import Settings
from mlops_cli.app import app

pytestmark = pytest.mark.integration

runner = CliRunner()


@pytest.fixture
def missing_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """MLOPS_TRACKING_URI naming a SQLite store in a folder that does not exist."""
    store = tmp_path / "no-such-folder" / "mlflow.db"
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLOPS_TRACKING_URI", f"sqlite:///{store}")
    return store


def test_a_pipeline_run_against_a_missing_store_stops_at_preflight_in_one_line(
        missing_store: Path, tmp_path: Path) -> None:
    source = tmp_path / "tx.csv"
    generate_transactions(1000, seed=1).to_csv(source, index=False)

    result = runner.invoke(app, ["pipeline", "run", str(source)])

    assert result.exit_code == 1, result.output
    assert " ".join(result.output.split()) == (
        f"error: no tracking store at {missing_store}: restore it, or create a new one on purpose with "
        "`mlops init`")
    assert not missing_store.parent.exists()  # nothing registered anywhere: no store was made
    assert not (tmp_path / "home" / "kfp").exists()


def test_registry_calls_refuse_a_missing_store_rather_than_create_one(missing_store: Path) -> None:
    with pytest.raises(RegistryError, match=f"no tracking store at {missing_store}"):
        registry.alias_version(Settings())
    assert not missing_store.parent.exists()


def test_init_creates_the_store_and_its_folder_and_may_be_repeated(missing_store: Path) -> None:
    first = runner.invoke(app, ["init"])
    again = runner.invoke(app, ["init"])

    assert (first.exit_code, again.exit_code) == (0, 0), first.output + again.output
    assert f"tracking store ready at {missing_store}" in " ".join(first.output.split())
    with sqlite3.connect(missing_store) as db:  # MLflow's schema, migrated
        assert db.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
    db.close()
    assert registry.alias_version(Settings()) is None  # an empty registry, now reachable


def test_init_on_a_tracking_server_has_nothing_to_create(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLOPS_TRACKING_URI", "http://mlflow:s3cret-pass@127.0.0.1:9")

    result = runner.invoke(app, ["init"])

    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()) == (
        "tracking server http://mlflow:***@127.0.0.1:9 keeps its own store; nothing to create")
