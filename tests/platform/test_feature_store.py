"""The Feast store end to end on generated data: offline point-in-time features, incremental
materialization that merges instead of overwriting, and an in-process replay in which the online
features of every later transaction equal the offline ones."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from feature_repo.online import open_online_features
from feature_repo.store import FeastOnlineRows, materialize_online, open_store, publish_features
from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.errors import FeatureStoreError
from mlops.feature_store import offline_features
from mlops.features import compute_features
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.settings import Settings

pytestmark = pytest.mark.unit

TS = "event_timestamp"


@dataclass
class Published:
    settings: Settings
    frame: pd.DataFrame
    offline: pd.DataFrame


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory, contract: DataContract) -> Published:
    settings = Settings(home=tmp_path_factory.mktemp("store"))
    frame = generate_transactions(1500, seed=21)
    publish_features(frame, contract, settings)
    offline = offline_features(settings, contract, frame)
    return Published(settings, frame, offline)


def _score_and_record(online: OnlineFeatures, contract: DataContract, row: pd.Series) -> dict[str, float]:
    keys = {e.join_key: str(row[e.join_key]) for e in contract.entities}
    [seen] = online.record_events([OnlineEvent(keys, str(row["transaction_id"]), row[TS],
                                               {"amount": float(row["amount"])})])
    return compute_features(contract, seen.histories, row[TS], {"amount": float(row["amount"])})


def test_replay_after_materialization_equals_offline_features(published: Published, contract: DataContract) -> None:
    """Materialize as of a cut, then score every later transaction in time order."""
    frame, offline = published.frame, published.offline
    cut = len(frame) * 2 // 3
    as_of = frame[TS].iloc[cut] - pd.Timedelta(microseconds=1)
    written = materialize_online(published.settings, contract, as_of.to_pydatetime())
    assert written["customer_history"] == frame.iloc[:cut]["customer_id"].nunique()
    online = open_online_features(published.settings, contract)  # the service's path, no feast
    replayed = pd.DataFrame([_score_and_record(online, contract, frame.iloc[i]) for i in range(cut, len(frame))],
                            index=frame.index[cut:])
    diff = (replayed - offline.loc[replayed.index, contract.feature_names]).abs().to_numpy().max()
    assert diff <= 1e-9
    # A later materialization up to the end merges: nothing the replay recorded is lost.
    materialize_online(published.settings, contract, frame[TS].max().to_pydatetime())
    last = frame.iloc[-1]
    keys = {e.join_key: str(last[e.join_key]) for e in contract.entities}
    again = compute_features(contract, online.read(keys), last[TS], {"amount": float(last["amount"])})
    assert again == pytest.approx(offline.loc[frame.index[-1], contract.feature_names].to_dict(), abs=1e-9)


def test_materialization_is_incremental(contract: DataContract, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    frame = generate_transactions(600, seed=4)
    publish_features(frame, contract, settings)
    middle = frame[TS].iloc[300].to_pydatetime()
    first = materialize_online(settings, contract, middle)
    second = materialize_online(settings, contract, middle)
    third = materialize_online(settings, contract, (frame[TS].max() + timedelta(seconds=1)).to_pydatetime())
    before = frame[frame[TS] <= pd.Timestamp(middle)]
    assert first == {"customer_history": before["customer_id"].nunique(),
                     "merchant_history": before["merchant_id"].nunique()}
    assert second == {"customer_history": 0, "merchant_history": 0}
    assert third["customer_history"] == frame[frame[TS] > pd.Timestamp(middle)]["customer_id"].nunique()


def test_materialize_before_any_training_run_names_the_cause(contract: DataContract, tmp_path: Path) -> None:
    with pytest.raises(FeatureStoreError, match=r"no offline features .* run the training pipeline first"):
        materialize_online(Settings(home=tmp_path), contract, pd.Timestamp.now(tz="UTC").to_pydatetime())


def test_a_failing_online_store_is_an_error_not_an_unknown_entity(published: Published,
                                                                   contract: DataContract) -> None:
    store = open_store(published.settings)
    online = OnlineFeatures(FeastOnlineRows(store), contract)
    (published.settings.feast_dir / "broken").mkdir(exist_ok=True)
    store.config.online_store.path = str(published.settings.feast_dir / "broken")  # a folder, not a DB
    store._provider = None  # type: ignore[attr-defined]  # reopen the store on the new path
    with pytest.raises(FeatureStoreError, match="online store read failed"):
        online.read({"customer_id": "C1", "merchant_id": "M1"})
