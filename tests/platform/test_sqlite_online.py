"""The service's direct SQLite path and Feast agree on every byte, both ways, and the direct path
reads concurrently without losing a write-through."""

from __future__ import annotations

import shutil
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from feature_repo.config import store_config
from feature_repo.online import open_online_features
from feature_repo.store import FeastOnlineRows, publish_features
from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.errors import FeatureStoreError
from mlops.histories import EVENTS_FIELD, NEWEST_FIELD
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.settings import Settings
from mlops.sqlite_online import OnlineRow, SqliteOnlineRows, decode_string_value, encode_value, entity_key_bytes

if TYPE_CHECKING:  # importing feast takes seconds: a fast-tier worker that runs none of these tests skips it
    from feast import FeatureStore

pytestmark = pytest.mark.unit

MOMENT = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def published(contract: DataContract, tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, FeatureStore]:
    settings = Settings(home=tmp_path_factory.mktemp("direct"))
    return settings, publish_features(generate_transactions(200, seed=5), contract, settings)


@pytest.mark.parametrize("entity", ["C1", "M-ü-" + "x" * 200])
def test_entity_keys_are_feasts_serialization(entity: str) -> None:
    from feast.infra.key_encoding_utils import serialize_entity_key
    from feast.protos.feast.types.EntityKey_pb2 import EntityKey
    from feast.protos.feast.types.Value_pb2 import Value

    proto = EntityKey(join_keys=["customer_id"], entity_values=[Value(string_val=entity)])
    assert entity_key_bytes("customer_id", entity) == serialize_entity_key(proto, entity_key_serialization_version=3)


@pytest.mark.parametrize("value", ["", "[[1,2.5]]", "é" * 300, 0, 1_772_000_000_123_456, -5])
def test_values_are_feasts_value_protos(value: str | int) -> None:
    from feast.protos.feast.types.Value_pb2 import Value

    proto = Value(string_val=value) if isinstance(value, str) else Value(int64_val=value)
    assert encode_value(value) == proto.SerializeToString()
    assert decode_string_value(proto.SerializeToString()) == (value if isinstance(value, str) else None)


def _rows(view: str, key: str, prefix: str) -> list[OnlineRow]:
    return [OnlineRow(view, key, f"{prefix}{n}", {EVENTS_FIELD: f'{{"n": {n}}}', NEWEST_FIELD: 1_772_000_000 + n},
                      MOMENT + timedelta(seconds=n)) for n in range(3)]


def _table(settings: Settings, view: str, prefix: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(settings.feast_dir / "online.db") as db:
        return sorted(db.execute(f"SELECT entity_key, feature_name, value, value_text, event_ts FROM fraud_{view} "
                                 "WHERE value_text LIKE ? OR feature_name = ?", ('{"n"%', NEWEST_FIELD)).fetchall())


def test_direct_writes_are_what_feast_writes_and_each_reads_the_other(
        published: tuple[Settings, FeatureStore], contract: DataContract) -> None:
    settings, store = published
    view = contract.feature_views[0]
    key = contract.entity(view.entity).join_key
    feast_rows, direct = FeastOnlineRows(store), SqliteOnlineRows.from_feast_config(store_config(settings))

    feast_rows.write(_rows(view.view_name, key, "via-feast-"))
    written_by_feast = _table(settings, view.view_name, "via-feast-")
    direct.write(_rows(view.view_name, key, "via-feast-"))  # the same rows again, now directly
    assert _table(settings, view.view_name, "via-feast-") == written_by_feast

    direct.write(_rows(view.view_name, key, "direct-"))
    entities = ["direct-0", "via-feast-2", "never-seen"]
    assert feast_rows.read(view.view_name, key, entities, EVENTS_FIELD) == ['{"n": 0}', '{"n": 2}', None]
    assert direct.read(view.view_name, key, entities, EVENTS_FIELD) == ['{"n": 0}', '{"n": 2}', None]
    direct.close()


def test_the_direct_store_runs_in_wal_mode(published: tuple[Settings, FeatureStore], contract: DataContract) -> None:
    settings, _ = published
    online = open_online_features(settings, contract)
    online.read({"customer_id": "C1", "merchant_id": "M1"})
    with sqlite3.connect(settings.feast_dir / "online.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    online.close()


def test_concurrent_requests_on_one_card_lose_no_event(published: tuple[Settings, FeatureStore],
                                                       contract: DataContract) -> None:
    settings, store = published
    online = open_online_features(settings, contract)
    keys = {"customer_id": "C-burst", "merchant_id": "M-burst"}

    def record(n: int) -> None:
        online.record_events([OnlineEvent(keys, f"T-burst-{n}", MOMENT + timedelta(milliseconds=n), {"amount": 1.0})])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(record, range(40)))
    seen_by_feast = OnlineFeatures(FeastOnlineRows(store), contract).read(keys)
    assert {name: len(h) for name, h in seen_by_feast.items()} == {v.view_name: 40 for v in contract.feature_views}
    online.close()


def test_a_missing_or_foreign_store_is_an_error(contract: DataContract, tmp_path_factory: pytest.TempPathFactory,
                                                published: tuple[Settings, FeatureStore]) -> None:
    empty = Settings(home=tmp_path_factory.mktemp("no-store"))
    with pytest.raises(FeatureStoreError, match="no online store at"):
        open_online_features(empty, contract).read({"customer_id": "C1", "merchant_id": "M1"})
    config = store_config(published[0])
    with pytest.raises(FeatureStoreError, match="entity_key_serialization_version 3"):
        SqliteOnlineRows.from_feast_config({**config, "entity_key_serialization_version": 2})


def test_commits_reach_the_database_file_by_background_checkpoint(
        published: tuple[Settings, FeatureStore], contract: DataContract, tmp_path: Path) -> None:
    settings, _ = published
    view = contract.feature_views[0]
    direct = SqliteOnlineRows.from_feast_config(store_config(settings))
    direct.write(_rows(view.view_name, contract.entity(view.entity).join_key, "checkpointed-"))
    deadline = time.monotonic() + 10
    found: list[tuple[object, ...]] = []
    while not found and time.monotonic() < deadline:
        time.sleep(0.2)
        shutil.copy(settings.feast_dir / "online.db", tmp_path / "without-wal.db")  # the file alone, no WAL
        with sqlite3.connect(tmp_path / "without-wal.db") as db:
            found = db.execute(f"SELECT value_text FROM fraud_{view.view_name} WHERE value_text = ?",
                               ('{"n": 2}',)).fetchall()
    direct.close()
    assert found



def test_a_corrupt_store_is_an_error_not_an_unknown_entity(contract: DataContract, tmp_path: Path) -> None:
    corrupt = tmp_path / "online.db"
    corrupt.write_bytes(b"not a database" * 100)
    online = OnlineFeatures(SqliteOnlineRows(corrupt, "fraud"), contract)
    with pytest.raises(FeatureStoreError, match="online store read failed: DatabaseError"):
        online.read({"customer_id": "C1", "merchant_id": "M1"})


def test_a_stored_history_that_does_not_decode_is_an_error_not_an_unknown_entity(
        published: tuple[Settings, FeatureStore], contract: DataContract) -> None:
    settings, _ = published
    view = contract.feature_views[0]
    direct = SqliteOnlineRows.from_feast_config(store_config(settings))
    direct.write([OnlineRow(view.view_name, contract.entity(view.entity).join_key, "C-torn",
                            {EVENTS_FIELD: '{"ids": ["T1"], "times": [', NEWEST_FIELD: 1}, MOMENT)])
    online = OnlineFeatures(direct, contract)
    with pytest.raises(FeatureStoreError, match="online store read failed: JSONDecodeError"):
        online.read({"customer_id": "C-torn", "merchant_id": "M1"})
    online.close()
