"""A real Feast store under a temporary home: point-in-time training features and online lookups
agree with the pure-pandas feature tables, so training and serving see the same values."""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.feature_store import (
    feature_refs,
    materialize,
    online_features,
    open_store,
    publish_features,
    training_features,
)
from mlops.features import compute_view, feature_defaults
from mlops.settings import BUNDLED_CONTRACT, Settings

TS = "event_timestamp"


@dataclass
class Published:
    contract: DataContract
    settings: Settings
    frame: pd.DataFrame
    store: Any
    training: pd.DataFrame


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Published:
    # Importing feast prepends simplefilter("once", DeprecationWarning) to the process's filters,
    # which would mask pytest's filterwarnings for the rest of this fixture: keep it scoped.
    with warnings.catch_warnings():
        importlib.import_module("feast")
    contract = load_contract(BUNDLED_CONTRACT)
    settings = Settings(home=tmp_path_factory.mktemp("feast_home"))
    # Shuffle so "the frame's order" is not simply time order.
    frame = generate_transactions(1500, seed=7).sample(frac=1.0, random_state=0).reset_index(drop=True)
    store = publish_features(frame, contract, settings)
    training = training_features(store, frame, contract)
    materialize(store, frame, contract)
    return Published(contract, settings, frame, store, training)


def _expected_before(frame: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """For each row: the latest feature row of its entity with timestamp strictly before the row's."""
    expected = frame[[contract.id_column, *(e.join_key for e in contract.entities), TS]]
    expected = expected.sort_values(TS, kind="stable")
    for view in contract.feature_views:
        key = contract.entity(view.entity).join_key
        table = compute_view(frame, contract, view).sort_values(TS, kind="stable")
        expected = pd.merge_asof(expected, table, on=TS, by=key, direction="backward",
                                 allow_exact_matches=False)
    ordered: pd.DataFrame = expected.set_index(contract.id_column).loc[frame[contract.id_column]]
    return ordered.fillna(feature_defaults(contract)).reset_index()


def test_store_state_lives_under_home(published: Published) -> None:
    feast_dir = published.settings.feast_dir
    assert feast_dir.is_relative_to(published.settings.resolved_home)
    assert (feast_dir / "registry.db").is_file()
    assert (feast_dir / "online.db").is_file()
    assert sorted(p.name for p in (feast_dir / "data").iterdir()) == [
        "customer_features.parquet", "merchant_features.parquet"]
    names = sorted(v.name for v in published.store.list_feature_views())
    assert names == ["customer_features", "merchant_features"]
    assert len(feature_refs(published.contract)) == len(published.contract.feature_names)


def test_training_features_return_every_row_in_order(published: Published) -> None:
    frame, training, contract = published.frame, published.training, published.contract
    assert len(training) == len(frame)
    assert training[contract.id_column].tolist() == frame[contract.id_column].tolist()
    pd.testing.assert_frame_equal(training[list(frame.columns)], frame)
    assert list(training.columns) == [*frame.columns, *contract.feature_names]
    assert training[contract.feature_names].notna().all().all()


def test_training_features_are_the_state_strictly_before_each_row(published: Published) -> None:
    frame, training, contract = published.frame, published.training, published.contract
    expected = _expected_before(frame, contract)
    assert expected[contract.id_column].tolist() == training[contract.id_column].tolist()
    for name in contract.feature_names:
        np.testing.assert_allclose(training[name].to_numpy(dtype="float64"),
                                   expected[name].to_numpy(dtype="float64"),
                                   rtol=1e-9, atol=1e-9, err_msg=name)
    # The row's own transaction is never in its features (no label leakage through the aggregates).
    first_of_customer = frame.groupby("customer_id")[TS].transform("min") == frame[TS]
    assert first_of_customer.sum() == frame["customer_id"].nunique()
    defaults = pd.Series(feature_defaults(contract))
    customer_names = [f.name for f in contract.feature_views[0].features]
    assert (training.loc[first_of_customer, customer_names] == defaults[customer_names]).all().all()
    # ... and the features carry history: many rows see earlier transactions.
    assert (training["customer_txn_count_24h"] >= 1).mean() > 0.1
    assert (training["merchant_txn_count_24h"] >= 1).mean() > 0.5


def test_online_features_equal_training_features_as_of_after_all_data(published: Published) -> None:
    frame, contract = published.frame, published.contract
    by_time = frame.sort_values(TS)
    picked = pd.concat([by_time.tail(4), by_time.iloc[[10, 500, 900]]]).drop_duplicates("customer_id")
    as_of = frame[TS].max() + pd.Timedelta(hours=6)
    offline = training_features(published.store, picked.reset_index(drop=True), contract, as_of=as_of)
    rows = [{"customer_id": c, "merchant_id": m} for c, m in zip(picked["customer_id"], picked["merchant_id"],
                                                               strict=True)]
    online = online_features(published.store, rows, contract)
    assert list(online.columns) == contract.feature_names
    np.testing.assert_allclose(online.to_numpy(dtype="float64"),
                               offline[contract.feature_names].to_numpy(dtype="float64"), rtol=1e-9, atol=1e-9)
    # The online state is the entity's latest feature row, which includes its last transaction.
    for position, customer in enumerate(picked["customer_id"]):
        times = frame.loc[frame["customer_id"] == customer, TS]
        in_last_day = (times > times.max() - pd.Timedelta(hours=24)).sum()
        assert online["customer_txn_count_24h"].iloc[position] == in_last_day >= 1


def test_unknown_entities_get_the_defaults(published: Published) -> None:
    contract = published.contract
    known = published.frame.iloc[0]
    rows = [
        {"customer_id": "C999999", "merchant_id": "M99999"},
        {"customer_id": str(known["customer_id"]), "merchant_id": "M99999"},
    ]
    online = online_features(published.store, rows, contract)
    defaults = feature_defaults(contract)
    assert online.iloc[0].to_dict() == defaults
    merchant_features = [f.name for f in contract.feature_views[1].features]
    assert online.loc[1, merchant_features].to_dict() == {n: defaults[n] for n in merchant_features}
    assert online["customer_txn_count_24h"].iloc[1] >= 1


def test_open_store_reopens_the_applied_registry(published: Published) -> None:
    reopened = open_store(published.settings)
    assert sorted(v.name for v in reopened.list_feature_views()) == ["customer_features", "merchant_features"]
    assert [s.name for s in reopened.list_feature_services()] == ["model_inputs"]


def test_settings_home_isolates_state(published: Published, tmp_path: Path) -> None:
    other = Settings(home=tmp_path)
    assert other.feast_dir != published.settings.feast_dir
    assert not other.feast_dir.exists()
