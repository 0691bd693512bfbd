"""Window features against a brute-force recomputation from raw rows, over random transaction
streams (hypothesis): offline through Feast's point-in-time join, and online through the real
SQLite online store with write-through, event by event."""

from __future__ import annotations

import math
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from mlops.contract import DataContract
from mlops.feature_store import publish_features, read_offline_tables, training_features
from mlops.features import (
    append_event,
    build_history_table,
    compute_features,
    decode_history,
    empty_history,
    merge_histories,
    replay_features,
    to_micros,
    unknown_entities,
)
from mlops.online_features import FeastOnlineRows, OnlineFeatures
from mlops.settings import Settings

BASE = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
TS = "event_timestamp"
# Half-hour steps hit the 1 h and 24 h window edges exactly; few steps make same-instant ties.
_OFFSETS = st.integers(min_value=0, max_value=24 * 12).map(lambda n: timedelta(minutes=30 * n))
_EVENT = st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]), _OFFSETS,
                   st.integers(min_value=1, max_value=500_000).map(lambda cents: cents / 100))
STREAMS = st.lists(_EVENT, min_size=1, max_size=25)


def stream_frame(events: list[tuple[str, str, timedelta, float]], prefix: str = "") -> pd.DataFrame:
    rows = [{"transaction_id": f"{prefix}T{i:03d}", "customer_id": prefix + c, "merchant_id": prefix + m,
             TS: BASE + offset, "amount": amount} for i, (c, m, offset, amount) in enumerate(events)]
    return pd.DataFrame(rows)


def brute_force(frame: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    """Each row's features straight from the definition, one raw row at a time."""
    out = []
    for _, row in frame.iterrows():
        t = row[TS]
        values: dict[str, float] = {}
        for view in contract.feature_views:
            key = contract.entity(view.entity).join_key
            mine = frame[frame[key] == row[key]]
            for feature in view.features:
                window = feature.window_delta
                if feature.agg == "seconds_since_previous":
                    before = mine[mine[TS] < t][TS]
                    gap = (t - before.max()).total_seconds() if len(before) else math.inf
                    values[feature.name] = min(gap, window.total_seconds())
                    continue
                inside = mine[(mine[TS] >= t - window) & (mine[TS] < t)]
                if feature.agg == "count":
                    values[feature.name] = float(len(inside))
                    continue
                assert feature.column is not None
                amounts = [float(a) for a in inside[feature.column]]
                values[feature.name] = {
                    "sum": math.fsum(amounts), "max": max(amounts, default=0.0),
                    "mean": math.fsum(amounts) / len(amounts) if amounts else 0.0,
                }[feature.agg]
        hour = t.hour + t.minute / 60 + t.second / 3600
        day = t.dayofweek + hour / 24
        values |= {"hour_of_day_sin": math.sin(2 * math.pi * hour / 24),
                   "hour_of_day_cos": math.cos(2 * math.pi * hour / 24),
                   "day_of_week_sin": math.sin(2 * math.pi * day / 7),
                   "day_of_week_cos": math.cos(2 * math.pi * day / 7)}
        out.append({name: values[name] for name in contract.feature_names})
    return pd.DataFrame(out, index=frame.index)


def assert_features_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    diff = (got.astype("float64") - expected.astype("float64")).abs().to_numpy()
    assert float(diff.max(initial=0.0)) <= 1e-9, got.compare(expected)


def test_the_current_transaction_and_its_instant_are_excluded(contract: DataContract) -> None:
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", timedelta(0), 20.0),
                          ("c1", "m1", timedelta(minutes=30), 5.0), ("c1", "m1", timedelta(hours=1), 7.0)])
    expected = brute_force(frame, contract)
    assert expected["customer_txn_count_1h"].tolist() == [0.0, 0.0, 2.0, 3.0]  # [t - 1h, t): t itself out, t - 1h in
    assert expected["customer_amount_sum_24h"].tolist() == [0.0, 0.0, 30.0, 35.0]
    assert expected["customer_seconds_since_previous"].tolist() == [2_592_000.0, 2_592_000.0, 1800.0, 1800.0]


@hypothesis_settings(max_examples=60, deadline=None)
@given(events=STREAMS)
def test_history_table_as_of_each_row_matches_brute_force(contract: DataContract,
                                                          events: list[tuple[str, str, timedelta, float]]) -> None:
    """The offline history rows, picked as of each transaction the way the join picks them."""
    frame = stream_frame(events)
    tables = {v.view_name: build_history_table(frame, contract, v) for v in contract.feature_views}
    got = []
    for _, row in frame.iterrows():
        histories = {}
        for view in contract.feature_views:
            key = contract.entity(view.entity).join_key
            table = tables[view.view_name]
            in_force = table[(table[key] == row[key]) & (table[TS] <= row[TS])]
            histories[view.view_name] = decode_history(view, in_force.iloc[-1]["events"])
        got.append(compute_features(contract, histories, row[TS]))
    assert_features_equal(pd.DataFrame(got, index=frame.index), brute_force(frame, contract))


@pytest.fixture(scope="module")
def feast_home(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("features"))


@hypothesis_settings(max_examples=8, deadline=None)
@given(events=STREAMS)
def test_offline_point_in_time_features_through_feast_match_brute_force(
        contract: DataContract, feast_home: Settings, events: list[tuple[str, str, timedelta, float]]) -> None:
    frame = stream_frame(events)
    store = publish_features(frame, contract, feast_home)
    enriched = training_features(store, frame, contract, read_offline_tables(feast_home, contract))
    assert len(enriched) == len(frame)
    assert enriched["transaction_id"].tolist() == frame["transaction_id"].tolist()
    assert_features_equal(enriched[contract.feature_names], brute_force(frame, contract))


@pytest.fixture(scope="module")
def online(contract: DataContract, tmp_path_factory: pytest.TempPathFactory) -> OnlineFeatures:
    settings = Settings(home=tmp_path_factory.mktemp("online"))
    seed = stream_frame([("seed", "seed", timedelta(0), 1.0)])
    return OnlineFeatures(FeastOnlineRows(publish_features(seed, contract, settings)), contract)


def _serve(online: OnlineFeatures, contract: DataContract, row: pd.Series) -> dict[str, float]:
    keys = {e.join_key: str(row[e.join_key]) for e in contract.entities}
    with online.entities_locked(keys.items()):
        histories = online.read(keys)
        features = compute_features(contract, histories, row[TS])
        online.record(keys, histories, row["transaction_id"], row[TS], {"amount": row["amount"]})
    return features


@hypothesis_settings(max_examples=30, deadline=None)
@given(events=STREAMS, seed=st.integers(0, 2**16))
def test_online_write_through_features_match_brute_force(
        contract: DataContract, online: OnlineFeatures, events: list[tuple[str, str, timedelta, float]],
        seed: int) -> None:
    """Requests in time order (same-instant ones in random order), each recorded after scoring."""
    frame = stream_frame(events, prefix=f"{uuid.uuid4().hex[:8]}-")
    order = sorted(range(len(frame)), key=lambda i: (frame[TS].iloc[i], random.Random(seed + i).random()))
    served = {i: _serve(online, contract, frame.iloc[i]) for i in order}
    got = pd.DataFrame([served[i] for i in range(len(frame))], index=frame.index)
    assert_features_equal(got, brute_force(frame, contract))


def test_a_retried_transaction_is_recorded_once(contract: DataContract, online: OnlineFeatures) -> None:
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", timedelta(minutes=5), 3.0)], prefix="retry-")
    first = frame.iloc[0]
    for _ in range(3):
        _serve(online, contract, first)
    assert _serve(online, contract, frame.iloc[1])["customer_txn_count_1h"] == 1.0


def test_a_burst_on_one_card_counts_up(contract: DataContract, online: OnlineFeatures) -> None:
    burst = stream_frame([("c1", "m1", timedelta(minutes=n), 50.0) for n in range(5)], prefix="burst-")
    counts = [_serve(online, contract, burst.iloc[i])["customer_txn_count_1h"] for i in range(5)]
    assert counts == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_merging_an_older_batch_keeps_newer_events(contract: DataContract) -> None:
    view = contract.feature_views[0]
    t0 = to_micros(BASE)
    online_history = append_event(view, empty_history(view), "new", t0 + 3_600_000_000, {"amount": 9.0})
    offline_history = append_event(view, empty_history(view), "old", t0, {"amount": 1.0})
    assert online_history is not None
    assert offline_history is not None
    merged = merge_histories(view, online_history, offline_history)
    assert merged.ids == ("old", "new")
    assert merge_histories(view, merged, offline_history) == merged  # idempotent


def test_unknown_entities_are_those_without_an_earlier_event(contract: DataContract) -> None:
    view = contract.feature_views[0]
    seen = append_event(view, empty_history(view), "a", to_micros(BASE), {"amount": 1.0})
    assert seen is not None
    histories = {view.view_name: seen}
    assert unknown_entities(contract, histories, BASE) == ["customer", "merchant"]
    assert unknown_entities(contract, histories, BASE + timedelta(seconds=1)) == ["merchant"]


def test_offline_tables_never_touch_the_online_store(contract: DataContract, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0)])
    publish_features(frame, contract, settings)
    online_db = settings.feast_dir / "online.db"
    before = online_db.read_bytes() if online_db.exists() else b""
    publish_features(stream_frame([("c9", "m9", timedelta(hours=2), 99.0)]), contract, settings)
    after = online_db.read_bytes() if online_db.exists() else b""
    assert after == before


@hypothesis_settings(max_examples=40, deadline=None)
@given(events=STREAMS)
def test_in_memory_replay_matches_brute_force(contract: DataContract,
                                              events: list[tuple[str, str, timedelta, float]]) -> None:
    frame = stream_frame(events).sample(frac=1.0, random_state=0)  # any input order
    assert_features_equal(replay_features(frame, contract), brute_force(frame, contract))
