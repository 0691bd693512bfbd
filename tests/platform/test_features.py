"""Window features against a brute-force recomputation from raw rows, over random transaction
streams (hypothesis): offline through the columnar backfill (DuckDB) and the offline store, and
online through the real SQLite online store with write-through, event by event."""

from __future__ import annotations

import itertools
import math
import random
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from feature_oracle import (
    AMOUNT,
    BASE,
    DAY,
    DUCKDB,
    LATENESS_US,
    STREAMS,
    TS,
    WIDE_STREAMS,
    assert_features_equal,
    backfilled,
    brute_force,
    served_features,
    stream_frame,
)
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from feature_repo.store import FeastOnlineRows, publish_features
from mlops.contract import DataContract, FeatureSpec, FeatureViewSpec
from mlops.errors import InputError
from mlops.feature_replay import replay_features
from mlops.feature_store import offline_features
from mlops.features import compute_features, to_micros, unknown_entities
from mlops.histories import History, append_event, decode_history, empty_history, merge_histories, stored_fields
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.settings import Settings

pytestmark = pytest.mark.unit


def test_the_current_transaction_and_its_instant_are_excluded(contract: DataContract) -> None:
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", timedelta(0), 20.0),
                          ("c1", "m1", timedelta(minutes=30), 5.0), ("c1", "m1", timedelta(hours=1), 7.0)])
    expected = replay_features(frame, contract)
    assert_features_equal(expected, brute_force(frame, contract))
    assert expected["customer_txn_count_1h"].tolist() == [0.0, 0.0, 2.0, 3.0]  # [t - 1h, t): t itself out, t - 1h in
    assert expected["customer_amount_sum_24h"].tolist() == [0.0, 0.0, 30.0, 35.0]
    assert expected["customer_seconds_since_previous"].tolist() == [2_592_000.0, 2_592_000.0, 1800.0, 1800.0]
@hypothesis_settings(max_examples=60, deadline=None)
@given(events=WIDE_STREAMS)
def test_backfill_equals_brute_force_and_the_per_event_online_computation(
        contract: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float]]) -> None:
    frame = stream_frame(events)
    got = backfilled(frame, contract, tmp_path_factory.mktemp("backfill"))
    assert_features_equal(got, brute_force(frame, contract))
    assert_features_equal(got, replay_features(frame.sample(frac=1.0, random_state=0), contract).loc[frame.index])


def test_backfill_keeps_every_input_column_and_names_a_missing_one(contract: DataContract, tmp_path: Path) -> None:
    frame = stream_frame(EDGE_STREAM).assign(channel="pos")
    frame.to_parquet(tmp_path / "raw.parquet", index=False)
    DUCKDB.backfill(tmp_path / "raw.parquet", tmp_path / "out.parquet", contract)
    table = pd.read_parquet(tmp_path / "out.parquet")
    assert list(table.columns) == [*frame.columns, *contract.feature_names]
    assert (table[contract.feature_names].dtypes == "float64").all()
    frame.drop(columns="amount").to_parquet(tmp_path / "no_amount.parquet", index=False)
    with pytest.raises(InputError, match="no column\\(s\\) amount"):
        DUCKDB.backfill(tmp_path / "no_amount.parquet", tmp_path / "never.parquet", contract)


EDGE_STREAM = [
    ("c1", "m1", timedelta(0), 100.0),
    ("c1", "m2", 10 * DAY, 5.0),
    ("c1", "m1", 10 * DAY + timedelta(hours=1), 7.0),
    ("c1", "m1", 10 * DAY + timedelta(hours=1), 9.0),
    ("c1", "m2", 11 * DAY + timedelta(hours=1), 2.0),
    ("c1", "m1", 11 * DAY + timedelta(hours=1, seconds=1), 50.0),
    ("c1", "m1", 17 * DAY + timedelta(hours=1, seconds=1), 1.0),
    ("c2", "m1", 60 * DAY, 3.0),
    ("c2", "m1", 89 * DAY, 4.0),
]
CAP = 30 * 86_400.0


def test_edge_stream_features_by_hand(contract: DataContract) -> None:
    frame = stream_frame(EDGE_STREAM)
    for expected in (replay_features(frame, contract), brute_force(frame, contract)):
        _assert_edge_stream_values(expected)


def _assert_edge_stream_values(expected: pd.DataFrame) -> None:
    assert expected["customer_seconds_since_previous"].tolist() == [
        CAP, 864_000.0, 3_600.0, 3_600.0, 86_400.0, 1.0, 518_400.0, CAP, 2_505_600.0]
    assert expected["customer_txn_count_1h"].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert expected["customer_txn_count_24h"].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 1.0, 0.0, 0.0, 0.0]
    assert expected["customer_amount_sum_24h"].tolist() == [0.0, 0.0, 5.0, 5.0, 16.0, 2.0, 0.0, 0.0, 0.0]
    assert expected["customer_amount_max_24h"].tolist() == [0.0, 0.0, 5.0, 5.0, 9.0, 2.0, 0.0, 0.0, 0.0]
    assert expected["customer_amount_mean_7d"].tolist() == [0.0, 0.0, 5.0, 5.0, 7.0, 23 / 4, 26.0, 0.0, 0.0]
    assert expected["merchant_seconds_since_previous"].tolist() == [
        CAP, CAP, 864_000.0 + 3_600.0, 864_000.0 + 3_600.0, 90_000.0, 86_400.0 + 1.0, 518_400.0, CAP, 2_505_600.0]


def test_edge_stream_online_and_offline_paths_match_brute_force(contract: DataContract, tmp_path: Path) -> None:
    frame = stream_frame(EDGE_STREAM)
    expected = brute_force(frame, contract)
    assert_features_equal(replay_features(frame.sample(frac=1.0, random_state=1), contract).loc[frame.index], expected)
    assert_features_equal(backfilled(frame, contract, tmp_path), expected)


def test_history_keeps_the_horizon_and_the_previous_instant(contract: DataContract) -> None:
    view = contract.feature_views[0]  # customer: 7-day horizon
    t0 = to_micros(BASE)
    day = 86_400 * 1_000_000
    history = empty_history(view)
    for event_id, t_us, amount in [("a", t0, 1.0), ("b", t0 + 10 * day, 2.0)]:
        appended = append_event(view, history, event_id, t_us, {"amount": amount})
        assert appended is not None
        history = appended
    assert (history.ids, history.values["amount"]) == (("a", "b"), (1.0, 2.0))  # "a": the previous instant
    assert append_event(view, history, "b", t0 + 10 * day, {"amount": 2.0}) is None  # a retry records nothing
    newer = append_event(view, history, "c", t0 + 10 * day + 1, {"amount": 3.0})
    assert newer is not None
    assert newer.ids == ("b", "c")  # "a" is older than the horizon and no longer the previous instant
    at_horizon = append_event(view, newer, "d", t0 + 17 * day, {"amount": 4.0})
    assert at_horizon is not None
    assert at_horizon.ids == ("b", "c", "d")  # "b" lies exactly one horizon back: kept


def test_stored_history_round_trips_and_reads_in_time_order(contract: DataContract) -> None:
    view = contract.feature_views[0]
    stored = '{"ids":["late","early"],"times":[20,10],"values":{"amount":[0.1,2.5]}}'
    history = decode_history(view, stored)
    assert (history.ids, history.times, history.values["amount"]) == (("early", "late"), (10, 20), (2.5, 0.1))
    assert decode_history(view, history.encode(view)) == history
    # Out of order although the ids alone are in order: the time decides, then the id.
    unordered = decode_history(view, '{"ids":["a","b","c"],"times":[30,10,10],"values":{"amount":[3.0,1.0,2.0]}}')
    assert (unordered.ids, unordered.times, unordered.values["amount"]) == (("b", "c", "a"), (10, 10, 30),
                                                                            (1.0, 2.0, 3.0))
    assert stored_fields(view, history) == {"events": history.encode(view), "newest_event_us": 20}
    for missing in (None, float("nan"), '{"ids":[],"times":[],"values":{"amount":[]}}'):
        assert decode_history(view, missing) == empty_history(view)
    for wrong_type, name in ((7, "int"), (1.5, "float")):
        with pytest.raises(ValueError, match=f"history of customer_history is a {name}, not JSON text"):
            decode_history(view, wrong_type)
    with pytest.raises(ValueError, match="columns of different lengths"):  # a torn record: two ids, one time
        decode_history(view, '{"ids":["a","b"],"times":[1],"values":{"amount":[1.0,2.0]}}')
    assert merge_histories(view, empty_history(view), empty_history(view)) == empty_history(view)


def test_a_view_over_two_columns_keeps_each_columns_values() -> None:
    view = FeatureViewSpec(entity="customer", features=(
        FeatureSpec(name="amount_sum_1h", agg="sum", column="amount", window="1h"),
        FeatureSpec(name="fee_max_1h", agg="max", column="fee", window="1h")))
    history = empty_history(view)
    for event_id, t_us, amount, fee in (("b", 20, 2.0, 0.25), ("a", 10, 1.0, 0.5)):
        appended = append_event(view, history, event_id, t_us, {"amount": amount, "fee": fee})
        assert appended is not None
        history = appended
    assert (history.ids, dict(history.values)) == (("a", "b"), {"amount": (1.0, 2.0), "fee": (0.5, 0.25)})
    assert decode_history(view, history.encode(view)) == history


@hypothesis_settings(max_examples=30, deadline=None)
@given(events=WIDE_STREAMS, cut=st.integers(min_value=0, max_value=29))
def test_newest_state_per_entity_is_the_write_through_history(
        contract: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float]], cut: int) -> None:
    """What materialization loads for an entity as of T is what write-through left after its events up to T."""
    frame = stream_frame(events)
    end = sorted(frame[TS])[min(cut, len(frame) - 1)]
    folder = tmp_path_factory.mktemp("state")
    frame.to_parquet(folder / "offline.parquet", index=False)
    for view in contract.feature_views:
        key = contract.entity(view.entity).join_key
        expected: dict[str, History] = {}
        for _, row in frame[frame[TS] <= end].sample(frac=1.0, random_state=cut).iterrows():
            history = expected.get(row[key], empty_history(view))
            expected[row[key]] = append_event(view, history, row["transaction_id"], to_micros(row[TS]),
                                              {"amount": float(row["amount"])}, lateness_us=LATENESS_US) or history
        batches = list(DUCKDB.latest_histories(folder / "offline.parquet", contract, view, end.to_pydatetime(), None,
                                        batch=2))
        assert all(len(b) <= 2 for b in batches)
        assert dict(pair for b in batches for pair in b) == expected
        later = frame[TS][frame[TS] <= end].max() - timedelta(microseconds=1)
        touched = {e for b in DUCKDB.latest_histories(folder / "offline.parquet", contract, view, end.to_pydatetime(),
                                               later.to_pydatetime(), batch=100) for e, _ in b}
        assert touched == set(frame[(frame[TS] > later) & (frame[TS] <= end)][key])


def test_times_do_not_depend_on_the_machines_zone(contract: DataContract, monkeypatch: pytest.MonkeyPatch) -> None:
    """Naive times are UTC and aware ones are converted to UTC, on a machine set to Berlin too."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        utc = datetime(2026, 3, 8, 18, 0, 30, tzinfo=UTC)
        naive, at_plus_two = utc.replace(tzinfo=None), utc.astimezone(timezone(timedelta(hours=2)))
        for moment in (naive, at_plus_two, pd.Timestamp(naive), pd.Timestamp(at_plus_two)):
            assert to_micros(moment) == 1_772_992_830_000_000
            assert compute_features(contract, {}, moment, AMOUNT) == compute_features(contract, {}, utc, AMOUNT)
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(("moment", "hour_angle", "day_angle"), [
    # Monday 06:00 UTC: a quarter turn of the day, a quarter of a day into the week.
    (datetime(2026, 3, 2, 6, 0, tzinfo=UTC), math.pi / 2, 2 * math.pi * 0.25 / 7),
    # The same instant written at +02:00, and naive (read as UTC) on Sunday 18:00:30.
    (datetime(2026, 3, 2, 8, 0, tzinfo=timezone(timedelta(hours=2))), math.pi / 2, 2 * math.pi * 0.25 / 7),
    (datetime(2026, 3, 8, 18, 0, 30), 2 * math.pi * 64_830 / 86_400, 2 * math.pi * (6 + 64_830 / 86_400) / 7),
    (datetime(2026, 3, 8, 18, 0, 30, 500_000, tzinfo=UTC), 2 * math.pi * 64_830.5 / 86_400,
     2 * math.pi * (6 + 64_830.5 / 86_400) / 7),
])
def test_time_features_encode_the_utc_hour_and_weekday(contract: DataContract, moment: datetime,
                                                       hour_angle: float, day_angle: float) -> None:
    got = compute_features(contract, {}, moment, AMOUNT)
    assert [got[n] for n in contract.time_features] == pytest.approx(
        [math.sin(hour_angle), math.cos(hour_angle), math.sin(day_angle), math.cos(day_angle)], abs=1e-12)
    since_epoch = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)) - datetime(1970, 1, 1, tzinfo=UTC)
    assert to_micros(moment) == since_epoch // timedelta(microseconds=1)


@pytest.fixture(scope="module")
def feast_home(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(home=tmp_path_factory.mktemp("features"))


@hypothesis_settings(max_examples=8, deadline=None)
@given(events=STREAMS)
def test_offline_features_through_the_offline_store_match_brute_force(
        contract: DataContract, feast_home: Settings, events: list[tuple[str, str, timedelta, float]]) -> None:
    """Stored rows get their own features; a moment the store never saw gets the history's then."""
    frame = stream_frame(events)
    publish_features(frame, contract, feast_home)
    enriched = offline_features(feast_home, contract, frame)
    assert enriched["transaction_id"].tolist() == frame["transaction_id"].tolist()
    assert_features_equal(enriched[contract.feature_names], brute_force(frame, contract))
    unseen = frame.assign(transaction_id="new", **{TS: frame[TS] + timedelta(minutes=1)})
    both = pd.concat([frame, unseen.iloc[:1]], ignore_index=True)
    assert_features_equal(offline_features(feast_home, contract, unseen.iloc[:1])[contract.feature_names],
                          brute_force(both, contract).iloc[-1:].set_axis(unseen.index[:1]))


@pytest.fixture(scope="module")
def online(contract: DataContract, tmp_path_factory: pytest.TempPathFactory) -> OnlineFeatures:
    settings = Settings(home=tmp_path_factory.mktemp("online"))
    seed = stream_frame([("seed", "seed", timedelta(0), 1.0)])
    return OnlineFeatures(FeastOnlineRows(publish_features(seed, contract, settings)), contract)


@hypothesis_settings(max_examples=30, deadline=None)
@given(events=STREAMS, seed=st.integers(0, 2**16))
def test_online_write_through_features_match_brute_force(
        contract: DataContract, online: OnlineFeatures, events: list[tuple[str, str, timedelta, float]],
        seed: int) -> None:
    """Requests in time order (same-instant ones in random order), each recorded after scoring."""
    frame = stream_frame(events, prefix=f"{uuid.uuid4().hex[:8]}-")
    order = sorted(range(len(frame)), key=lambda i: (frame[TS].iloc[i], random.Random(seed + i).random()))
    served = {i: served_features(online, contract, frame.iloc[i]) for i in order}
    got = pd.DataFrame([served[i] for i in range(len(frame))], index=frame.index)
    assert_features_equal(got, brute_force(frame, contract))


@hypothesis_settings(max_examples=30, deadline=None)
@given(events=STREAMS, seed=st.integers(0, 2**16), cuts=st.sets(st.integers(1, 40), max_size=8))
def test_events_recorded_in_batches_see_the_same_features_as_one_by_one(
        contract: DataContract, online: OnlineFeatures, events: list[tuple[str, str, timedelta, float]],
        seed: int, cuts: set[int]) -> None:
    """The service records concurrent requests together: each still sees the earlier ones."""
    frame = stream_frame(events, prefix=f"{uuid.uuid4().hex[:8]}-")
    order = sorted(range(len(frame)), key=lambda i: (frame[TS].iloc[i], random.Random(seed + i).random()))
    edges = [0, *sorted(c for c in cuts if c < len(order)), len(order)]
    served: dict[int, dict[str, float]] = {}
    for start, end in itertools.pairwise(edges):
        rows = [frame.iloc[i] for i in order[start:end]]
        seen = online.record_events([OnlineEvent({e.join_key: str(r[e.join_key]) for e in contract.entities},
                                                 r["transaction_id"], r[TS], {"amount": r["amount"]}) for r in rows])
        served.update({i: compute_features(contract, h.histories, r[TS], {"amount": r["amount"]})
                       for i, r, h in zip(order[start:end], rows, seen, strict=True)})
    got = pd.DataFrame([served[i] for i in range(len(frame))], index=frame.index)
    assert_features_equal(got, brute_force(frame, contract))


def test_a_retried_transaction_is_recorded_once(contract: DataContract, online: OnlineFeatures) -> None:
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", timedelta(minutes=5), 3.0)], prefix="retry-")
    first = frame.iloc[0]
    for _ in range(3):
        served_features(online, contract, first)
    assert served_features(online, contract, frame.iloc[1])["customer_txn_count_1h"] == 1.0


def test_a_burst_on_one_card_counts_up(contract: DataContract, online: OnlineFeatures) -> None:
    burst = stream_frame([("c1", "m1", timedelta(minutes=n), 50.0) for n in range(5)], prefix="burst-")
    counts = [served_features(online, contract, burst.iloc[i])["customer_txn_count_1h"] for i in range(5)]
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


def test_replay_reads_times_written_at_any_offset_as_their_instants(contract: DataContract) -> None:
    # A file's times may carry different offsets (sources in two zones): each row is its instant in UTC.
    frame = stream_frame(EDGE_STREAM)
    zones = itertools.cycle([timezone(timedelta(hours=2)), timezone(timedelta(hours=-5)), UTC])
    texts = [t.astimezone(zone).isoformat() for t, zone in zip(frame[TS], zones, strict=False)]  # cycle: endless
    written = frame.assign(**{TS: texts})
    assert written[TS].map(lambda text: text[-6:]).nunique() == 3
    assert_features_equal(replay_features(written, contract), replay_features(frame, contract))


def test_replay_of_no_rows_is_an_empty_table_of_every_feature(contract: DataContract) -> None:
    empty = stream_frame(EDGE_STREAM).iloc[:0]
    replayed = replay_features(empty, contract)
    assert (len(replayed), list(replayed.columns)) == (0, contract.feature_names)


@hypothesis_settings(max_examples=40, deadline=None)
@given(events=STREAMS)
def test_in_memory_replay_matches_brute_force(contract: DataContract,
                                              events: list[tuple[str, str, timedelta, float]]) -> None:
    frame = stream_frame(events).sample(frac=1.0, random_state=0)  # any input order
    assert_features_equal(replay_features(frame, contract), brute_force(frame, contract))
