"""Online label features: events scored through the online store, their labels delivered late by
`mlops labels ingest` (out of order, some twice); the online label features then equal the offline
definition over the labels delivered so far, and equal it fully once every label has arrived."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from feature_repo.online import open_online_features
from feature_repo.store import publish_features
from mlops.contract import DataContract
from mlops.errors import FeatureStoreError
from mlops.features import compute_features
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir
from mlops.settings import Settings
from mlops_cli.app import app
from monitoring.label_features import deliver_labels

pytestmark = pytest.mark.integration

runner = CliRunner()
BASE = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
TS, ID, LABEL = "event_timestamp", "transaction_id", "is_fraud"
LABEL_FEATURES = {
    "customer": [{"name": "customer_fraud_count_1d", "agg": "label_count", "window": "1d", "delay": "1h"},
                 {"name": "customer_fraud_rate_1h", "agg": "label_rate", "window": "1h", "delay": "30m"}],
    "merchant": [{"name": "merchant_fraud_rate_3d", "agg": "label_rate", "window": "3d", "delay": "2d"},
                 {"name": "merchant_fraud_count_3d", "agg": "label_count", "window": "3d", "delay": "2d"}],
}


@pytest.fixture
def labelled(contract: DataContract, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DataContract:
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += LABEL_FEATURES[view["entity"]]
    path = tmp_path / "contract.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLOPS_CONTRACT_PATH", str(path))
    return DataContract.model_validate(raw)


def events_frame(n: int, seed: int) -> pd.DataFrame:
    rng = random.Random(seed)
    rows = [{ID: f"T{i:03d}", "customer_id": rng.choice(["c1", "c2", "c3"]), "merchant_id": rng.choice(["m1", "m2"]),
             TS: BASE + timedelta(minutes=30 * rng.randint(0, 200)), "amount": float(rng.randint(1, 500)),
             LABEL: rng.randint(0, 1)} for i in range(n)]
    return pd.DataFrame(rows).sort_values([TS, ID], ignore_index=True)


def expected_label_features(frame: pd.DataFrame, contract: DataContract, keys: dict[str, str],
                            moment: datetime, delivered: set[str]) -> dict[str, float]:
    """The definition from raw rows: delivered labels of the entity's events in [t - delay - window, t - delay)."""
    values = {}
    for view in contract.feature_views:
        key = contract.entity(view.entity).join_key
        mine = frame[frame[key] == keys[key]]
        for feature in (f for f in view.features if f.is_label):
            seen_by = moment - feature.delay_delta
            inside = mine[(mine[TS] >= seen_by - feature.window_delta) & (mine[TS] < seen_by)]
            known = [float(label) for i, label in zip(inside[ID], inside[LABEL], strict=True) if i in delivered]
            values[feature.name] = (math.fsum(known) if feature.agg == "label_count"
                                    else math.fsum(known) / len(known) if known else 0.0)
    return values


def assert_online_equals_offline(online: OnlineFeatures, frame: pd.DataFrame, contract: DataContract,
                                 delivered: set[str]) -> float:
    """Compares at moments from the newest event to past every delay; the largest expected value."""
    largest = 0.0
    newest = frame[TS].max().to_pydatetime()
    names = [f.name for v in contract.feature_views for f in v.features if f.is_label]
    for customer in ("c1", "c2", "c3"):
        for merchant in ("m1", "m2"):
            keys = {"customer_id": customer, "merchant_id": merchant}
            histories = online.read(keys)
            for later in (timedelta(0), timedelta(minutes=30), timedelta(hours=1), timedelta(days=1),
                          timedelta(days=2), timedelta(days=4)):
                got = compute_features(contract, histories, newest + later, {"amount": 1.0})
                expected = expected_label_features(frame, contract, keys, newest + later, delivered)
                assert {n: got[n] for n in names} == pytest.approx(expected, abs=1e-12), (keys, later)
                largest = max(largest, *expected.values())
    return largest


def ingest(path: Path, frame: pd.DataFrame) -> str:
    frame[[ID, LABEL]].to_csv(path, index=False)
    result = runner.invoke(app, ["labels", "ingest", str(path)])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_labels_ingested_late_and_out_of_order_reach_the_online_label_features(
        labelled: DataContract, tmp_path: Path) -> None:
    settings = Settings()
    frame = events_frame(40, seed=3)
    seed = pd.DataFrame([{ID: "seed", "customer_id": "seed", "merchant_id": "seed", TS: BASE, "amount": 1.0,
                          LABEL: 0}])
    publish_features(seed, labelled, settings)  # creates the online store (and the registry)
    online = open_online_features(settings, labelled)
    log = PredictionLog(log_dir(settings), fsync_interval_s=0)
    try:
        for row in frame.to_dict("records"):
            event_id, amount, moment = str(row[ID]), float(row["amount"]), pd.Timestamp(row[TS]).to_pydatetime()
            keys = {"customer_id": str(row["customer_id"]), "merchant_id": str(row["merchant_id"])}
            [seen] = online.record_events([OnlineEvent(keys, event_id, moment, {"amount": amount})])
            served = compute_features(labelled, seen.histories, moment, {"amount": amount})
            assert all(served[f["name"]] == 0.0 for fs in LABEL_FEATURES.values() for f in fs)  # no label known yet
            log.write([PredictionRecord(event_id=event_id, event_timestamp=moment, entities=keys,
                                        inputs={"amount": amount}, features=served, unknown_entities=[],
                                        unknown_categories=[], logged_at=moment, probability=0.5,
                                        decision="legit", model_name="m", model_version="1")])
        assert_online_equals_offline(online, frame, labelled, delivered=set())
        shuffled = frame.sample(frac=1.0, random_state=4)  # labels arrive in any order
        first, rest = shuffled.iloc[:25], shuffled.iloc[25:]
        output = ingest(tmp_path / "first.csv", first)
        assert "25 labels not delivered yet, 25 with a logged prediction (0 wait for theirs)" in output
        assert_online_equals_offline(online, frame, labelled, delivered=set(first[ID]))
        ingest(tmp_path / "rest.csv", rest.assign(**{LABEL: 1 - rest[LABEL]}))  # a first verdict ...
        ingest(tmp_path / "rest.csv", rest)  # ... overturned: the later label wins
        again = ingest(tmp_path / "again.csv", rest)  # nothing new: nothing is sent to the store again
        assert "0 labels not delivered yet, 0 with a logged prediction" in again
        assert "0 entity histories updated" in again
        assert assert_online_equals_offline(online, frame, labelled, delivered=set(frame[ID])) >= 1.0
    finally:
        online.close()
        log.close()


def test_a_label_ahead_of_its_prediction_waits_and_is_delivered_once_it_is_logged(
        labelled: DataContract, tmp_path: Path) -> None:
    settings = Settings()
    frame = events_frame(6, seed=5)
    publish_features(frame.head(0), labelled, settings)
    online = open_online_features(settings, labelled)
    log = PredictionLog(log_dir(settings), fsync_interval_s=0)
    rows = frame.to_dict("records")
    try:
        def serve(row: dict[Hashable, Any]) -> None:
            moment = pd.Timestamp(row[TS]).to_pydatetime()
            keys = {"customer_id": str(row["customer_id"]), "merchant_id": str(row["merchant_id"])}
            amount = float(row["amount"])
            online.record_events([OnlineEvent(keys, str(row[ID]), moment, {"amount": amount})])
            log.write([PredictionRecord(event_id=str(row[ID]), event_timestamp=moment, entities=keys,
                                        inputs={"amount": amount}, features={}, unknown_entities=[],
                                        unknown_categories=[], logged_at=moment, probability=0.5,
                                        decision="legit", model_name="m", model_version="1")])

        for row in rows[:4]:
            serve(row)
        # The labels of all six arrive before the last two predictions are logged.
        assert "6 labels not delivered yet, 4 with a logged prediction (2 wait for theirs)" in ingest(
            tmp_path / "early.csv", frame)
        for row in rows[4:]:
            serve(row)
        later = ingest(tmp_path / "one.csv", frame.head(1))  # any later ingest retries the waiting ones
        assert "2 labels not delivered yet, 2 with a logged prediction (0 wait for theirs)" in later
        assert_online_equals_offline(online, frame, labelled, delivered=set(frame[ID]))
        assert "0 labels not delivered yet" in ingest(tmp_path / "again.csv", frame)
    finally:
        online.close()
        log.close()


def test_a_missing_online_store_is_an_error_not_an_empty_delivery(labelled: DataContract) -> None:
    labels = pd.DataFrame({"event_id": ["T1"], "label": [1]})
    log = PredictionLog(log_dir(Settings()), fsync_interval_s=0)
    log.write([PredictionRecord(event_id="T1", event_timestamp=BASE, entities={"customer_id": "c1",
                                "merchant_id": "m1"}, inputs={}, features={}, unknown_entities=[],
                                unknown_categories=[], logged_at=BASE, probability=0.5, decision="legit",
                                model_name="m", model_version="1")])
    log.close()
    with pytest.raises(FeatureStoreError, match="no online store"):
        deliver_labels(Settings(), labelled, labels)
