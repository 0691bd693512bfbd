"""Rolling features against a brute-force row-by-row reference, plus the genesis rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mlops.contract import DataContract, FeatureViewSpec
from mlops.data.generator import generate_transactions
from mlops.features import NO_HISTORY_VALUE, compute_all_views, compute_view, feature_defaults

TS = "event_timestamp"



@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    frame: pd.DataFrame = generate_transactions(800, seed=5)
    return frame


def _reference(frame: pd.DataFrame, contract: DataContract, view: FeatureViewSpec) -> pd.DataFrame:
    """For each distinct (entity, t): aggregate that entity's events with timestamp in (t - w, t]."""
    key = contract.entity(view.entity).join_key
    rows = []
    for entity, mine in frame.groupby(key, sort=True):
        times = mine[TS].dt.tz_convert(None).to_numpy()
        for t in np.unique(times):
            row: dict[str, object] = {key: entity, TS: pd.Timestamp(t, tz="UTC")}
            for feature in view.features:
                start = t - np.timedelta64(feature.window_delta)
                inside = (times > start) & (times <= t)
                if feature.agg == "count":
                    row[feature.name] = float(inside.sum())
                    continue
                assert feature.column is not None
                values = mine[feature.column].to_numpy(dtype="float64")[inside]
                row[feature.name] = float(getattr(np, feature.agg)(values))
            rows.append(row)
    return pd.DataFrame(rows)


def _split_genesis(table: pd.DataFrame, frame: pd.DataFrame, key: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    first = frame.groupby(key)[TS].min()
    is_genesis = table[TS] < table[key].map(first)
    return table[is_genesis], table[~is_genesis]


@pytest.mark.parametrize("view_index", [0, 1])
def test_view_matches_brute_force(frame: pd.DataFrame, contract: DataContract, view_index: int) -> None:
    view = contract.feature_views[view_index]
    key = contract.entity(view.entity).join_key
    table = compute_view(frame, contract, view)
    assert list(table.columns) == [key, TS, *(f.name for f in view.features)]
    _, events = _split_genesis(table, frame, key)
    expected = _reference(frame, contract, view)
    got = events.sort_values([key, TS]).reset_index(drop=True)
    assert len(got) == len(expected) == len(frame.drop_duplicates([key, TS]))
    assert got[key].tolist() == expected[key].tolist()
    assert (got[TS] == expected[TS]).all()
    for feature in view.features:
        np.testing.assert_allclose(got[feature.name].to_numpy(), expected[feature.name].to_numpy(),
                                   rtol=1e-9, atol=1e-9, err_msg=feature.name)
    # The windows do something: some entity has history inside some window.
    assert (got[view.features[0].name] > 1).any()


@pytest.mark.parametrize("view_index", [0, 1])
def test_one_genesis_row_per_entity_before_first_event(frame: pd.DataFrame, contract: DataContract,
                                                        view_index: int) -> None:
    view = contract.feature_views[view_index]
    key = contract.entity(view.entity).join_key
    table = compute_view(frame, contract, view)
    genesis, events = _split_genesis(table, frame, key)
    assert genesis[key].is_unique
    assert set(genesis[key]) == set(frame[key])
    names = [f.name for f in view.features]
    assert (genesis[names] == NO_HISTORY_VALUE).all().all()
    # Every real event counts at least itself, so no event row looks like "no history".
    count_feature = next(f.name for f in view.features if f.agg == "count")
    assert (events[count_feature] >= 1).all()
    first = frame.groupby(key)[TS].min()
    assert (genesis[TS] < genesis[key].map(first)).all()


def test_table_sorted_by_time_and_utc(frame: pd.DataFrame, contract: DataContract) -> None:
    for view in contract.feature_views:
        table = compute_view(frame, contract, view)
        assert str(table[TS].dt.tz) == "UTC"
        assert table[TS].is_monotonic_increasing


def test_same_instant_events_keep_the_full_state(contract: DataContract) -> None:
    t0 = pd.Timestamp("2026-01-01T00:00:00", tz="UTC")
    frame = pd.DataFrame({
        "transaction_id": ["a", "b", "c", "d"],
        "customer_id": ["C1", "C1", "C1", "C2"],
        "merchant_id": ["M1", "M1", "M2", "M1"],
        TS: [t0, t0 + pd.Timedelta(minutes=30), t0 + pd.Timedelta(minutes=30), t0 + pd.Timedelta(hours=2)],
        "amount": [10.0, 30.0, 50.0, 7.0],
    })
    customer = compute_view(frame, contract, contract.feature_views[0])
    rows = customer[(customer["customer_id"] == "C1") & (customer[TS] == t0 + pd.Timedelta(minutes=30))]
    assert len(rows) == 1
    row = rows.iloc[0]
    assert row["customer_txn_count_1h"] == 3
    assert row["customer_amount_sum_24h"] == 90
    assert row["customer_amount_max_24h"] == 50
    assert row["customer_amount_mean_7d"] == pytest.approx(30)
    # Windows are right-closed, left-open: at t0 + 1h the first event has left the 1h window.
    later = pd.concat([frame, pd.DataFrame({
        "transaction_id": ["e"], "customer_id": ["C1"], "merchant_id": ["M1"],
        TS: [t0 + pd.Timedelta(hours=1)], "amount": [1.0]})], ignore_index=True)
    table = compute_view(later, contract, contract.feature_views[0])
    last = table[(table["customer_id"] == "C1") & (table[TS] == t0 + pd.Timedelta(hours=1))].iloc[0]
    assert last["customer_txn_count_1h"] == 3
    assert last["customer_txn_count_24h"] == 4


def test_compute_all_views_keys(frame: pd.DataFrame, contract: DataContract) -> None:
    views = compute_all_views(frame, contract)
    assert list(views) == ["customer_features", "merchant_features"]


def test_feature_defaults_cover_every_feature(contract: DataContract) -> None:
    defaults = feature_defaults(contract)
    assert list(defaults) == contract.feature_names
    assert set(defaults.values()) == {NO_HISTORY_VALUE}
