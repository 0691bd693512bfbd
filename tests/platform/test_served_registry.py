"""mlops.served_registry against a real MLflow SQLite store: the SQL reader a service uses answers what
MLflow's own client answers (every alias, the canary and its share, each version's graph, its run)
after every move the registry makes, and fails closed the same way; a store of another schema, a file
store or a separate registry is read through MLflow. (The REST reader against a real server:
test_served_registry_server.py.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow_models import logged_model

from mlops import registry
from mlops.errors import NotFoundError, RegistryError
from mlops.preflight import local_store_path
from mlops.served_registry import (
    KNOWN_SCHEMA,
    MlflowServedRegistry,
    ServedRegistry,
    SqliteServedRegistry,
    served_registry,
)
from mlops.settings import Settings

pytestmark = pytest.mark.unit

ALIASES = ("production", "staging", "canary", "challenger", "fallback")


def _store(settings: Settings) -> Path:
    path = local_store_path(settings.resolved_tracking_uri)
    assert path is not None
    return path


def _answers(reader: ServedRegistry, versions: list[str], tmp_path: Path) -> dict[str, object]:
    """Everything a service reads, as one comparable value."""
    answers: dict[str, object] = {alias: reader.alias_version(alias) for alias in ALIASES}
    answers["canary share"] = reader.canary()
    for version in versions:
        dest = tmp_path / type(reader).__name__ / version
        try:
            served = reader.download_version(version, dest)
        except NotFoundError as exc:  # MLflow's client adds its own detail after a colon
            answers[version] = exc.message.split(":")[0]
        else:
            answers[version] = (served.name, served.version, served.run_id, served.onnx_path.read_bytes(),
                                sorted(p.name for p in served.onnx_path.parent.iterdir()))  # files beside it too
    return answers


def test_the_sql_reader_answers_what_mlflow_answers_after_every_move(settings: Settings, tmp_path: Path) -> None:
    sql = served_registry(settings)
    assert isinstance(sql, SqliteServedRegistry)
    via_mlflow = MlflowServedRegistry(settings)
    versions: list[str] = []

    def same(*, files: bool = False) -> dict[str, object]:
        """Both readers' answers after a move; every version's files too where ``files`` (moves never change them)."""
        fetched = [*versions, "99"] if files else []
        answers = _answers(sql, fetched, tmp_path)
        assert answers == _answers(via_mlflow, fetched, tmp_path)
        return answers

    assert same(files=True)["production"] is None  # no model registered yet: no alias, not an error
    uri, run_id = logged_model(settings)
    versions += [registry.register_version(settings, uri, run_id, {}) for _ in range(4)]
    v1, v2, v3, v4 = versions
    registry.promote(settings, v1, expected=None, actor="alice")
    assert same(files=True)["production"] == v1
    registry.promote(settings, v2, alias="challenger", expected=None, actor="bob")
    registry.start_canary(settings, v4, 20, actor="bob", reason="")
    registry.rollback(settings, actor="carol", reason="not yet")
    registry.start_canary(settings, v3, 10, actor="bob", reason="")
    assert same()["canary share"] == (v3, 10.0)
    registry.start_canary(settings, v3, 35, actor="bob", reason="more")  # the share set last is read
    assert same()["canary share"] == (v3, 35.0)
    registry.rollback(settings, actor="carol", reason="errors")
    assert same()["canary share"] is None
    # The alias moved back by hand (the UI): v4's own share, older than v3's in the same run.
    registry.client(settings).set_registered_model_alias(settings.model_name, registry.CANARY_ALIAS, v4)
    assert same()["canary share"] == (v4, 20.0)
    registry.promote(settings, v4, expected=v1, actor="alice")  # promoting the canary ends it
    answers = same()
    assert (answers["production"], answers["canary share"]) == (v4, None)
    registry.client(settings).delete_model_version(settings.model_name, v2)
    assert same(files=True)[v2] == f"model {settings.model_name} version {v2} not found"
    for reader in (sql, via_mlflow):  # a malformed version is a failed request in both, never "not found"
        with pytest.raises(RegistryError, match="model registry failed reading version latest"):
            reader.download_version("latest", tmp_path / "malformed")


def test_a_canary_without_a_run_serves_no_traffic_in_both_readers(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    registry.register_version(settings, uri, run_id, {})
    client = registry.client(settings)
    by_hand = (settings.artifact_root / "by-hand").as_uri()  # files registered outside any run
    orphan = str(client.create_model_version(settings.model_name, by_hand).version)
    client.set_registered_model_alias(settings.model_name, registry.CANARY_ALIAS, orphan)
    assert served_registry(settings).canary() == MlflowServedRegistry(settings).canary() == (orphan, 0.0)
    with pytest.raises(NotFoundError, match=f"version {orphan} has no model.onnx"):
        served_registry(settings).download_version(orphan, settings.resolved_home / "dl")


def test_a_missing_store_is_an_outage_not_no_model(settings: Settings) -> None:
    uri, run_id = logged_model(settings)
    registry.promote(settings, registry.register_version(settings, uri, run_id, {}), expected=None, actor="alice")
    reader = served_registry(settings)
    store = _store(settings)
    store.rename(store.with_suffix(".aside"))
    with pytest.raises(RegistryError, match="no tracking store at"):
        reader.alias_version("production")
    with pytest.raises(RegistryError):
        reader.canary()
    assert isinstance(served_registry(settings), SqliteServedRegistry)  # chosen even while the store is gone


def test_an_unreadable_table_is_an_outage(settings: Settings) -> None:
    registry.create_store(settings)
    with sqlite3.connect(_store(settings)) as db:
        db.execute("ALTER TABLE registered_model_aliases RENAME TO moved_aside")
    with pytest.raises(RegistryError, match="model registry unreachable: OperationalError"):
        SqliteServedRegistry(settings, _store(settings)).alias_version("production")


def test_a_store_of_another_schema_or_kind_is_read_through_mlflow(settings: Settings,
                                                                          tmp_path: Path) -> None:
    registry.create_store(settings)
    assert SqliteServedRegistry(settings, _store(settings)).schema() == KNOWN_SCHEMA
    with sqlite3.connect(_store(settings)) as db:
        db.execute("UPDATE alembic_version SET version_num = 'a-newer-mlflow'")
    assert isinstance(served_registry(settings), MlflowServedRegistry)
    file_store = settings.model_copy(update={"tracking_uri": (tmp_path / "mlruns").as_uri()})
    assert isinstance(served_registry(file_store), MlflowServedRegistry)
    elsewhere = settings.model_copy(update={"registry_uri": f"sqlite:///{tmp_path / 'other.db'}"})
    assert isinstance(served_registry(elsewhere), MlflowServedRegistry)


def test_the_installed_mlflow_migrates_to_the_schema_the_sql_was_written_for() -> None:
    """An MLflow upgrade that moves the schema fails here, not in a service: check the queries, then the revision."""
    import mlflow.store.db_migrations
    from alembic.script import ScriptDirectory

    migrations = Path(mlflow.store.db_migrations.__file__).parent
    assert ScriptDirectory(str(migrations)).get_current_head() == KNOWN_SCHEMA
