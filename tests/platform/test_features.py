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
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from feature_repo.store import FeastOnlineRows, publish_features
from mlops.backfill.engines import DuckDBEngine
from mlops.contract import DataContract, FeatureSpec, FeatureViewSpec
from mlops.errors import InputError
from mlops.feature_replay import replay_features
from mlops.feature_store import offline_features
from mlops.features import (
    History,
    append_event,
    canonical_text,
    compute_features,
    current_value_score,
    decode_history,
    empty_history,
    merge_histories,
    stored_fields,
    to_micros,
    unknown_entities,
)
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.settings import Settings

pytestmark = pytest.mark.unit

BASE = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
DUCKDB = DuckDBEngine(Settings())
TS = "event_timestamp"
AMOUNT = {"amount": 12.5}  # the event's own value, for features that compare it with the window
# Half-hour steps hit the 1 h and 24 h window edges exactly; few steps make same-instant ties.
_OFFSETS = st.integers(min_value=0, max_value=24 * 12).map(lambda n: timedelta(minutes=30 * n))
_EVENT = st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]), _OFFSETS,
                   st.integers(min_value=1, max_value=500_000).map(lambda cents: cents / 100))
STREAMS = st.lists(_EVENT, min_size=1, max_size=25)
# Days and the 7-day and 30-day edges, exactly and one microsecond either side, mixed with half hours.
_EDGES = [timedelta(days=d) + timedelta(microseconds=u) for d in (7, 30) for u in (-1, 0, 1)]
_WIDE_OFFSETS = st.one_of(_OFFSETS, st.integers(min_value=0, max_value=40).map(lambda d: timedelta(days=d)),
                          st.sampled_from(_EDGES))
WIDE_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]), _WIDE_OFFSETS,
                                  st.integers(min_value=1, max_value=500_000).map(lambda cents: cents / 100)),
                        min_size=1, max_size=30)


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
                if feature.is_label:  # [t - delay - window, t - delay), delivered labels only
                    seen_by = t - feature.delay_delta
                    labels = mine[(mine[TS] >= seen_by - window) & (mine[TS] < seen_by)][contract.label_column]
                    known = [float(label) for label in labels if not pd.isna(label)]
                    values[feature.name] = (math.fsum(known) if feature.agg == "label_count"
                                            else math.fsum(known) / len(known) if known else 0.0)
                    continue
                if feature.uses_text:  # values compared as text (an int as its digits), missing ones never
                    assert feature.column is not None
                    values[feature.name] = text_feature(feature, mine, row, contract)
                    continue
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
                if feature.uses_current_value:
                    values[feature.name] = exact_score(feature.agg, float(row[feature.column]), amounts)
                    continue
                values[feature.name] = {
                    "sum": math.fsum(amounts), "max": max(amounts, default=0.0),
                    "mean": math.fsum(amounts) / len(amounts) if amounts else 0.0,
                }[feature.agg]
        hour = t.hour + t.minute / 60 + (t.second + t.microsecond / 1e6) / 3600
        day = t.dayofweek + hour / 24
        values |= {"hour_of_day_sin": math.sin(2 * math.pi * hour / 24),
                   "hour_of_day_cos": math.cos(2 * math.pi * hour / 24),
                   "day_of_week_sin": math.sin(2 * math.pi * day / 7),
                   "day_of_week_cos": math.cos(2 * math.pi * day / 7)}
        out.append({name: values[name] for name in contract.feature_names})
    return pd.DataFrame(out, index=frame.index)


def _as_text(value: object, dtype: str) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(int(value)) if dtype == "int" else str(value)  # type: ignore[call-overload]


def text_feature(feature: FeatureSpec, mine: pd.DataFrame, row: pd.Series, contract: DataContract) -> float:
    """distinct_count / pair_seen / pair_seconds_since_previous from the entity's raw rows."""
    t, window, column = row[TS], feature.window_delta, str(feature.column)
    dtype = contract.column(column).dtype
    inside = mine[(mine[TS] >= t - window) & (mine[TS] < t)]
    texts = [_as_text(v, dtype) for v in inside[column]]
    if feature.agg == "distinct_count":
        return float(len({x for x in texts if x is not None}))
    own = _as_text(row[column], dtype)
    met = [moment for moment, text in zip(inside[TS], texts, strict=True) if own is not None and text == own]
    if feature.agg == "pair_seen":
        return 1.0 if met else 0.0
    return min((t - max(met)).total_seconds(), window.total_seconds()) if met else window.total_seconds()


def exact_score(agg: str, value: float, window: list[float]) -> float:
    """``ratio_to_mean`` / ``zscore`` of ``value`` against ``window`` in exact rational arithmetic."""
    n = len(window)
    exact = [Fraction(x) for x in window]
    mean = sum(exact, Fraction(0)) / n if n else Fraction(0)
    if agg == "ratio_to_mean":
        return 1.0 if mean == 0 else float(Fraction(value) / mean)
    if n < 2 or min(window) == max(window):
        return 0.0
    variance = sum(((x - mean) ** 2 for x in exact), Fraction(0)) / n
    return float(Fraction(value) - mean) / math.sqrt(float(variance))


def assert_scores_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """As :func:`assert_features_equal`, but a ratio or z-score (unbounded: 89,920 standard deviations
    from a window of nearly equal values is a valid z-score) to 1e-9 of its size when above 1."""
    scores = [c for c in expected.columns if "ratio" in c or "zscore" in c]
    assert_features_equal(got.drop(columns=scores), expected.drop(columns=scores))
    error = (got[scores].astype("float64") - expected[scores].astype("float64")).abs() / expected[scores].abs().clip(
        lower=1.0)
    assert float(error.max().max()) <= 1e-9, got[scores].compare(expected[scores])


def assert_features_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    diff = (got.astype("float64") - expected.astype("float64")).abs().to_numpy()
    assert float(diff.max(initial=0.0)) <= 1e-9, got.compare(expected)


def test_the_current_transaction_and_its_instant_are_excluded(contract: DataContract) -> None:
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", timedelta(0), 20.0),
                          ("c1", "m1", timedelta(minutes=30), 5.0), ("c1", "m1", timedelta(hours=1), 7.0)])
    expected = replay_features(frame, contract)
    assert_features_equal(expected, brute_force(frame, contract))
    assert expected["customer_txn_count_1h"].tolist() == [0.0, 0.0, 2.0, 3.0]  # [t - 1h, t): t itself out, t - 1h in
    assert expected["customer_amount_sum_24h"].tolist() == [0.0, 0.0, 30.0, 35.0]
    assert expected["customer_seconds_since_previous"].tolist() == [2_592_000.0, 2_592_000.0, 1800.0, 1800.0]


def backfilled(frame: pd.DataFrame, contract: DataContract, folder: Path) -> pd.DataFrame:
    """Each row's features from the DuckDB backfill of ``frame``, indexed like ``frame``."""
    source, out = folder / "raw.parquet", folder / "features.parquet"
    frame.to_parquet(source, index=False)
    DUCKDB.backfill(source, out, contract)
    table = pd.read_parquet(out)
    assert sorted(table["transaction_id"]) == sorted(frame["transaction_id"])
    assert (table[contract.feature_names].dtypes == "float64").all()
    by_id = table.set_index("transaction_id").loc[frame["transaction_id"]]
    return by_id[contract.feature_names].set_axis(frame.index)


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


# One stream that sits on every edge (a deterministic, fast counterpart of the hypothesis tests, for
# `make mutation`): an event exactly at t - 1h and t - 24h (in), one second beyond (out), two events
# of one instant, a 10-day gap past the 7-day history horizon, gaps above and below the 30-day cap.
_DAY = timedelta(days=1)
EDGE_STREAM = [
    ("c1", "m1", timedelta(0), 100.0),
    ("c1", "m2", 10 * _DAY, 5.0),
    ("c1", "m1", 10 * _DAY + timedelta(hours=1), 7.0),
    ("c1", "m1", 10 * _DAY + timedelta(hours=1), 9.0),
    ("c1", "m2", 11 * _DAY + timedelta(hours=1), 2.0),
    ("c1", "m1", 11 * _DAY + timedelta(hours=1, seconds=1), 50.0),
    ("c1", "m1", 17 * _DAY + timedelta(hours=1, seconds=1), 1.0),
    ("c2", "m1", 60 * _DAY, 3.0),
    ("c2", "m1", 89 * _DAY, 4.0),
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
                                              {"amount": float(row["amount"])}) or history
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


def _serve(online: OnlineFeatures, contract: DataContract, row: pd.Series) -> dict[str, float]:
    keys = {e.join_key: str(row[e.join_key]) for e in contract.entities}
    event = OnlineEvent(keys, row["transaction_id"], row[TS], {"amount": row["amount"]})  # as the predictor gathers it
    [histories] = online.record_events([event])
    return compute_features(contract, histories, row[TS], event.values)


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
        served.update({i: compute_features(contract, h, r[TS], {"amount": r["amount"]})
                       for i, r, h in zip(order[start:end], rows, seen, strict=True)})
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


# Label features: the bundled contract plus a label count and rate per view, with delays whose edges
# the streams hit (30 min and 1 h steps; the merchant's 7-day delay and 30-day reach are WIDE edges).
LABEL_FEATURES = {
    "customer": [{"name": "customer_fraud_count_1d", "agg": "label_count", "window": "1d", "delay": "1h"},
                 {"name": "customer_fraud_rate_1h", "agg": "label_rate", "window": "1h", "delay": "30m"}],
    "merchant": [{"name": "merchant_fraud_rate_23d", "agg": "label_rate", "window": "23d", "delay": "7d"},
                 {"name": "merchant_fraud_count_23d", "agg": "label_count", "window": "23d", "delay": "7d"}],
}
LABELLED_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]),
                                      _WIDE_OFFSETS, st.integers(min_value=1, max_value=500_000).map(lambda c: c / 100),
                                      st.integers(min_value=0, max_value=1)),
                            min_size=1, max_size=30)


def with_label_features(contract: DataContract) -> DataContract:
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += LABEL_FEATURES[view["entity"]]
    return DataContract.model_validate(raw)


@pytest.fixture(scope="module")
def labelled(contract: DataContract) -> DataContract:
    return with_label_features(contract)


def labelled_frame(events: list[tuple[str, str, timedelta, float, int]], prefix: str = "") -> pd.DataFrame:
    return stream_frame([e[:4] for e in events], prefix).assign(is_fraud=[e[4] for e in events])


def test_label_features_see_the_labels_of_the_delayed_window_by_hand(labelled: DataContract, tmp_path: Path) -> None:
    half = timedelta(minutes=30)
    frame = labelled_frame([("c1", "m1", timedelta(0), 1.0, 1), ("c1", "m1", half, 1.0, 0),
                            ("c1", "m1", 2 * half, 1.0, 1), ("c1", "m1", 3 * half, 1.0, 0),
                            ("c1", "m1", 3 * half, 1.0, 1), ("c1", "m1", 7 * _DAY, 1.0, 0),
                            ("c1", "m1", 30 * _DAY, 1.0, 0),
                            ("c1", "m1", 30 * _DAY + timedelta(microseconds=1), 1.0, 0)])
    expected = brute_force(frame, labelled)
    assert_features_equal(backfilled(frame, labelled, tmp_path), expected)
    assert_features_equal(replay_features(frame.sample(frac=1.0, random_state=2), labelled).loc[frame.index],
                          expected)
    # Rate over [t - 90 min, t - 30 min): at 1 h the 0-min event (1); at 1.5 h also the 30-min one (0).
    assert expected["customer_fraud_rate_1h"].tolist()[:5] == [0.0, 0.0, 1.0, 0.5, 0.5]
    # Count over [t - 25 h, t - 1 h): at 1 h the 0-min event lies exactly at t - delay (out), at 1.5 h it is in.
    assert expected["customer_fraud_count_1d"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    # [t - 30 d, t - 7 d): at 7 d the 0-min event is exactly 7 d back (out), at 30 d exactly 30 d back (in),
    # one microsecond later out again.
    assert expected["merchant_fraud_count_23d"].tolist()[5:] == [0.0, 3.0, 2.0]
    assert expected["merchant_fraud_rate_23d"].tolist()[5:] == [0.0, 0.5, 0.4]  # the 7-day event (0) counts too


@hypothesis_settings(max_examples=40, deadline=None)
@given(events=LABELLED_STREAMS)
def test_label_features_backfill_equals_brute_force_and_the_online_computation(
        labelled: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float, int]]) -> None:
    frame = labelled_frame(events)
    got = backfilled(frame, labelled, tmp_path_factory.mktemp("labels"))
    assert_features_equal(got, brute_force(frame, labelled))
    assert_features_equal(got, replay_features(frame.sample(frac=1.0, random_state=0), labelled).loc[frame.index])


def _flipped_within_the_delay(frame: pd.DataFrame, contract: DataContract, row: int) -> pd.DataFrame:
    """``frame`` with the label of every event at or after t - (the shortest delay) flipped, t the row's time."""
    delay = min(f.delay_delta for v in contract.feature_views for f in v.features if f.is_label)
    recent = frame[TS] >= frame[TS].iloc[row] - delay
    return frame.assign(is_fraud=frame["is_fraud"].where(~recent, 1 - frame["is_fraud"]))


@hypothesis_settings(max_examples=25, deadline=None)
@given(events=LABELLED_STREAMS, pick=st.integers(min_value=0, max_value=29))
def test_labels_inside_the_delay_never_change_a_rows_features(
        labelled: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float, int]], pick: int) -> None:
    """Labels a team could not know at t (events in [t - delay, t), and t itself) leave the row at t alone."""
    frame = labelled_frame(events)
    row = pick % len(frame)
    flipped = _flipped_within_the_delay(frame, labelled, row)
    folder = tmp_path_factory.mktemp("leak")
    before, after = backfilled(frame, labelled, folder), backfilled(flipped, labelled, folder)
    assert_features_equal(after.iloc[[row]], before.iloc[[row]])
    assert_features_equal(replay_features(flipped, labelled).iloc[[row]], before.iloc[[row]])


def test_the_training_table_never_sees_labels_inside_the_delay(labelled: DataContract, tmp_path: Path) -> None:
    """Flipping the labels of the newest events (within the shortest delay of the last one) changes
    those rows' own labels in the train/validation/test files and nothing else."""
    from pipelines.steps.preprocess import preprocess

    rng = random.Random(5)
    events = [(rng.choice(["c1", "c2"]), rng.choice(["m1", "m2"]), timedelta(minutes=30 * rng.randint(0, 200)),
               float(rng.randint(1, 500)), rng.randint(0, 1)) for _ in range(60)]
    frame = labelled_frame(events)
    flipped = _flipped_within_the_delay(frame, labelled, int(frame[TS].argmax()))
    assert (flipped["is_fraud"] != frame["is_fraud"]).any()
    tables = []
    for name, data in (("original", frame), ("flipped", flipped)):
        data.to_parquet(tmp_path / f"{name}.parquet", index=False)
        preprocess(tmp_path / f"{name}.parquet", labelled, Settings(home=tmp_path / name), tmp_path / name / "splits")
        tables.append(pd.concat([pd.read_parquet(tmp_path / name / "splits" / f"{s}.parquet")
                                 for s in ("train", "validation", "test")]).set_index("transaction_id").sort_index())
    original, changed = tables
    assert_features_equal(changed[labelled.feature_names], original[labelled.feature_names])
    assert_features_equal(original[labelled.feature_names],
                          brute_force(frame, labelled).set_axis(frame["transaction_id"]).sort_index())
    assert original[labelled.feature_names[-8:]].to_numpy().any()  # the label features are not all zero


# The current value against the entity's own window: a ratio to the mean and a z-score per view, on
# windows whose edges the streams hit; amounts often repeat (equal values: a z-score of 0).
CURRENT_VALUE_FEATURES = {
    "customer": [{"name": "customer_amount_ratio_24h", "agg": "ratio_to_mean", "column": "amount", "window": "24h"},
                 {"name": "customer_amount_zscore_7d", "agg": "zscore", "column": "amount", "window": "7d"}],
    "merchant": [{"name": "merchant_amount_zscore_1h", "agg": "zscore", "column": "amount", "window": "1h"},
                 {"name": "merchant_amount_ratio_30d", "agg": "ratio_to_mean", "column": "amount", "window": "30d"}],
}
_AMOUNTS = st.one_of(st.sampled_from([0.5, 2.5, 40.0]),
                     st.integers(min_value=1, max_value=500_000).map(lambda c: c / 100))
CURRENT_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]),
                                     _WIDE_OFFSETS, _AMOUNTS), min_size=1, max_size=30)


def with_current_value_features(contract: DataContract) -> DataContract:
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += CURRENT_VALUE_FEATURES[view["entity"]]
    return DataContract.model_validate(raw)


@pytest.fixture(scope="module")
def scored(contract: DataContract) -> DataContract:
    return with_current_value_features(contract)


def test_current_value_features_by_hand(scored: DataContract, tmp_path: Path) -> None:
    half = timedelta(minutes=30)
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", half, 20.0),
                          ("c1", "m1", 2 * half, 30.0), ("c1", "m1", 2 * half, 5.0),  # a tie: neither sees the other
                          ("c2", "m2", timedelta(0), 5.0), ("c2", "m2", half, 5.0), ("c2", "m2", 2 * half, 7.0),
                          ("c3", "m2", 3 * half, 0.0), ("c3", "m2", 4 * half, 0.0), ("c3", "m2", 5 * half, 3.0),
                          ("c1", "m1", 2 * half + _DAY, 1.0)])  # exactly 24 h after the tie: only the tie is in 24 h
    expected = brute_force(frame, scored)
    assert_features_equal(backfilled(frame, scored, tmp_path), expected)
    assert_features_equal(replay_features(frame.sample(frac=1.0, random_state=3), scored).loc[frame.index], expected)
    # An empty window's ratio is 1; a window of zeros too; 30 against {10, 20}: twice the mean, 3 std above.
    assert expected["customer_amount_ratio_24h"].tolist() == [1.0, 2.0, 2.0, 1 / 3, 1.0, 1.0, 1.4, 1.0, 1.0, 1.0,
                                                               1 / 17.5]
    assert expected["customer_amount_zscore_7d"].tolist()[:7] == [0.0, 0.0, 3.0, -2.0, 0.0, 0.0, 0.0]  # {5, 5}: 0
    # 1 at 24 h 1 min against {10, 20, 30, 5}: mean 16.25, population std sqrt(92.1875).
    assert expected["customer_amount_zscore_7d"].iloc[-1] == pytest.approx(-15.25 / math.sqrt(92.1875), abs=1e-12)
    # m2's 1 h window [t - 1h, t): {5, 5} at 1 h (equal: 0); 0 at 1.5 h against {5, 7} (mean 6, std 1);
    # 0 at 2 h against {7, 0} (mean 3.5, std 3.5); 3 at 2.5 h against {0, 0} (equal: 0).
    assert expected["merchant_amount_zscore_1h"].tolist()[4:10] == [0.0, 0.0, 0.0, -6.0, -1.0, 0.0]


@hypothesis_settings(max_examples=40, deadline=None)
@given(events=CURRENT_STREAMS)
def test_current_value_features_backfill_equals_brute_force_and_the_online_computation(
        scored: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, float]]) -> None:
    frame = stream_frame(events)
    got = backfilled(frame, scored, tmp_path_factory.mktemp("current"))
    assert_scores_equal(got, brute_force(frame, scored))
    assert_scores_equal(got, replay_features(frame.sample(frac=1.0, random_state=0), scored).loc[frame.index])


@pytest.fixture(scope="module")
def scored_online(scored: DataContract, tmp_path_factory: pytest.TempPathFactory) -> OnlineFeatures:
    settings = Settings(home=tmp_path_factory.mktemp("scored-online"))
    seed = stream_frame([("seed", "seed", timedelta(0), 1.0)])
    return OnlineFeatures(FeastOnlineRows(publish_features(seed, scored, settings)), scored)


@hypothesis_settings(max_examples=25, deadline=None)
@given(events=CURRENT_STREAMS, seed=st.integers(0, 2**16))
def test_current_value_features_through_the_online_store_match_brute_force(
        scored: DataContract, scored_online: OnlineFeatures, events: list[tuple[str, str, timedelta, float]],
        seed: int) -> None:
    """Requests in time order (ties in random order): the request's own amount against the stored history."""
    frame = stream_frame(events, prefix=f"{uuid.uuid4().hex[:8]}-")
    order = sorted(range(len(frame)), key=lambda i: (frame[TS].iloc[i], random.Random(seed + i).random()))
    served = {i: _serve(scored_online, scored, frame.iloc[i]) for i in order}
    got = pd.DataFrame([served[i] for i in range(len(frame))], index=frame.index)
    assert_scores_equal(got, brute_force(frame, scored))


def test_current_value_features_need_the_current_value(scored: DataContract) -> None:
    with pytest.raises(ValueError, match="compares the current value of 'amount'"):
        compute_features(scored, {}, BASE)
    empty = compute_features(scored, {}, BASE, {"amount": 12.5})
    assert [empty[f["name"]] for fs in CURRENT_VALUE_FEATURES.values() for f in fs] == [1.0, 0.0, 0.0, 1.0]


def test_offline_features_at_a_new_moment_compare_the_rows_own_value(scored: DataContract, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    frame = stream_frame([("c1", "m1", timedelta(0), 10.0), ("c1", "m1", timedelta(minutes=30), 20.0)])
    publish_features(frame, scored, settings)
    asked = frame.iloc[1:].assign(transaction_id="new", amount=45.0, **{TS: frame[TS].iloc[1] + timedelta(minutes=1)})
    got = offline_features(settings, scored, asked)
    expected = brute_force(pd.concat([frame, asked], ignore_index=True), scored).iloc[-1:].set_axis(asked.index)
    assert_features_equal(got[scored.feature_names], expected)
    assert got["customer_amount_ratio_24h"].iloc[0] == 3.0  # 45 against {10, 20}
    with pytest.raises(InputError, match="no column\\(s\\) amount"):
        offline_features(settings, scored, asked.drop(columns="amount"))


def test_zscore_of_nearly_equal_large_values_has_no_cancellation(scored: DataContract, tmp_path: Path) -> None:
    """Values of 50,000 a cent or two apart: the naive E[x^2] - E[x]^2 loses the variance's digits
    (~1e-4 against squares of 2.5e9); the two-pass and var_pop agree with exact arithmetic up to the
    rounding of the mean itself (ulp(50,000) / std, ~1e-10 of a z-score of 1)."""
    rng = random.Random(7)
    events = [("c1", "m1", timedelta(minutes=rng.randint(0, 600)), 50_000 + rng.randint(-2, 2) / 100)
              for _ in range(40)]
    frame = stream_frame(events)
    expected = brute_force(frame, scored)
    assert_scores_equal(backfilled(frame, scored, tmp_path), expected)
    assert_scores_equal(replay_features(frame, scored), expected)
    assert expected["customer_amount_zscore_7d"].abs().max() > 1.0  # the z-scores are not all 0
    window = [float(a) for a in frame["amount"].iloc[:20]]
    naive = math.fsum(x * x for x in window) / 20 - (math.fsum(window) / 20) ** 2
    exact = float(sum(((Fraction(x) - sum(map(Fraction, window)) / 20) ** 2 for x in window), Fraction(0)) / 20)
    assert abs(naive - exact) > 1e-3 * exact  # what the naive formula would have served


def test_zscore_variance_of_values_one_ulp_apart_is_the_exact_one() -> None:
    """The window's mean 1 + 2/3 ulp rounds to 1 + 1 ulp, so the deviations from it do not sum to 0:
    without the two-pass correction (their sum squared over n) the variance would be 1.5 times the
    exact one. The numerator is the value's distance from the window's (rounded) mean."""
    ulp = math.ulp(1.0)
    window = [1.0, 1.0 + ulp, 1.0 + ulp]
    exact = [Fraction(x) for x in window]
    variance = float(sum(((x - sum(exact, Fraction(0)) / 3) ** 2 for x in exact), Fraction(0)) / 3)
    mean = math.fsum(window) / 3
    assert mean == 1.0 + ulp
    for value in (1.0 + 4 * ulp, 1.0):
        expected = (value - mean) / math.sqrt(variance)
        assert current_value_score("zscore", value, window) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("family", ["current", "paired"])
def test_the_skew_check_compares_current_value_features_with_the_logged_inputs(
        family: str, contract: DataContract, tmp_path: Path) -> None:
    """Offline features at a logged prediction take its own amount (and channel) from the logged
    inputs, its merchant from the logged entities."""
    from mlops.feature_skew import check_skew
    from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir

    scored = with_current_value_features(contract) if family == "current" else with_text_features(contract)
    settings = Settings(home=tmp_path)
    rng = random.Random(11)
    frame = stream_frame([(rng.choice(["c1", "c2"]), rng.choice(["m1", "m2"]), timedelta(minutes=rng.randint(0, 300)),
                           rng.randint(1, 9_999) / 100) for _ in range(30)])
    frame["channel"] = [rng.choice(["pos", "online"]) for _ in range(30)]
    publish_features(frame, scored, settings)
    served = replay_features(frame, scored)
    log = PredictionLog(log_dir(settings), fsync_interval_s=0)
    try:
        log.write([PredictionRecord(
            event_id=row["transaction_id"], event_timestamp=row[TS],
            entities={"customer_id": row["customer_id"], "merchant_id": row["merchant_id"]},
            inputs={"amount": row["amount"], "channel": row["channel"]}, features=features, unknown_entities=[],
            unknown_categories=[], logged_at=row[TS], probability=0.5, decision="legit",
            model_name="m", model_version="1") for row, features in zip(frame.to_dict("records"),
                                                                        served.to_dict("records"), strict=True)])
    finally:
        log.close()
    report = check_skew(settings, scored, sample=30, tolerance=1e-9)
    assert (report.compared, report.differing) == (30, 0), report
    new = [f["name"] for fs in (CURRENT_VALUE_FEATURES if family == "current" else TEXT_FEATURES).values() for f in fs]
    assert served[new].nunique().min() > 1  # each compared feature varies



def test_the_skew_check_reports_late_labels_apart_from_skew(contract: DataContract, tmp_path: Path) -> None:
    """Served before any label arrived, the label features are 0 online and not offline: reported apart,
    not as skew; a value feature the service got wrong is still skew."""
    from mlops.feature_skew import check_skew
    from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir

    labelled = with_label_features(contract)
    settings = Settings(home=tmp_path)
    rng = random.Random(5)
    frame = stream_frame([(rng.choice(["c1", "c2"]), rng.choice(["m1", "m2"]), timedelta(hours=rng.randint(0, 400)),
                           rng.randint(1, 9_999) / 100) for _ in range(40)])
    frame["is_fraud"] = [1] * 20 + [0] * 20
    publish_features(frame, labelled, settings)
    served = replay_features(frame.drop(columns="is_fraud"), labelled)  # no label delivered yet
    served.loc[served.index[-1], "customer_txn_count_1h"] += 1  # one prediction served a wrong count
    log = PredictionLog(log_dir(settings), fsync_interval_s=0)
    try:
        log.write([PredictionRecord(
            event_id=row["transaction_id"], event_timestamp=row[TS],
            entities={"customer_id": row["customer_id"], "merchant_id": row["merchant_id"]},
            inputs={"amount": row["amount"]}, features=features, unknown_entities=[], unknown_categories=[],
            logged_at=row[TS], probability=0.5, decision="legit", model_name="m", model_version="1")
            for row, features in zip(frame.to_dict("records"), served.to_dict("records"), strict=True)])
    finally:
        log.close()
    offline = replay_features(frame, labelled)
    names = [f.name for v in labelled.feature_views for f in v.features if f.is_label]
    late = int((offline[names] - served[names]).abs().gt(1e-9).any(axis=1).sum())
    assert late > 0
    report = check_skew(settings, labelled, sample=40, tolerance=1e-9)
    assert (report.compared, report.differing, report.label_features_differing) == (40, 1, late), report
    assert report.worst_feature == "customer_txn_count_1h"


# Novelty and variety: distinct merchants and channels of a card, whether (and how long ago) the
# card met this merchant, and the same from the merchant's side; windows whose edges the streams hit.
TEXT_FEATURES = {
    "customer": [{"name": "customer_merchants_24h", "agg": "distinct_count", "column": "merchant_id", "window": "24h"},
                 {"name": "customer_channels_1h", "agg": "distinct_count", "column": "channel", "window": "1h"},
                 {"name": "customer_channel_gap_24h", "agg": "pair_seconds_since_previous", "column": "channel",
                  "window": "24h"},
                 {"name": "customer_met_channel_1h", "agg": "pair_seen", "column": "channel", "window": "1h"},
                 {"name": "customer_met_merchant_7d", "agg": "pair_seen", "column": "merchant_id", "window": "7d"},
                 {"name": "customer_merchant_gap_1h", "agg": "pair_seconds_since_previous", "column": "merchant_id",
                  "window": "1h"}],
    "merchant": [{"name": "merchant_customers_1h", "agg": "distinct_count", "column": "customer_id", "window": "1h"},
                 {"name": "merchant_met_customer_30d", "agg": "pair_seen", "column": "customer_id", "window": "30d"},
                 {"name": "merchant_customer_gap_7d", "agg": "pair_seconds_since_previous", "column": "customer_id",
                  "window": "7d"}],
}
TEXT_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2", "m3"]),
                                  _WIDE_OFFSETS, st.sampled_from(["pos", "online", "atm", None])),
                        min_size=1, max_size=30)  # a missing channel is no value: never counted, never met


def with_text_features(contract: DataContract) -> DataContract:
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += TEXT_FEATURES[view["entity"]]
    return DataContract.model_validate(raw)


@pytest.fixture(scope="module")
def paired(contract: DataContract) -> DataContract:
    return with_text_features(contract)


def text_frame(events: list[tuple[str, str, timedelta, str | None]], prefix: str = "") -> pd.DataFrame:
    channels = pd.Series([e[3] for e in events], dtype="object")
    return stream_frame([(c, m, offset, 10.0) for c, m, offset, _ in events], prefix).assign(channel=channels)


def test_novelty_and_variety_features_by_hand(paired: DataContract, tmp_path: Path) -> None:
    half = timedelta(minutes=30)
    frame = text_frame([("c1", "m1", timedelta(0), "pos"), ("c1", "m1", timedelta(0), "atm"),  # a tie
                        ("c1", "m2", half, "pos"), ("c1", "m1", 2 * half, "online"),
                        ("c1", "m2", 2 * half + _DAY, "pos"),  # exactly 24 h after m1's last: m1 still in
                        ("c1", "m1", 2 * half + 8 * _DAY, "pos")])  # beyond 7 d: the pair is new again
    expected = brute_force(frame, paired)
    assert_features_equal(backfilled(frame, paired, tmp_path), expected)
    assert_features_equal(replay_features(frame.sample(frac=1.0, random_state=5), paired).loc[frame.index], expected)
    assert expected["customer_merchants_24h"].tolist() == [0.0, 0.0, 1.0, 2.0, 1.0, 0.0]
    assert expected["customer_channels_1h"].tolist() == [0.0, 0.0, 2.0, 2.0, 0.0, 0.0]  # t - 1h is in, t out
    assert expected["customer_met_merchant_7d"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert expected["customer_merchant_gap_1h"].tolist() == [3600.0, 3600.0, 3600.0, 3600.0, 3600.0, 3600.0]
    assert expected["merchant_customer_gap_7d"].tolist() == [604_800.0, 604_800.0, 604_800.0, 3600.0,
                                                             86_400.0 + 1800.0, 604_800.0]
    assert expected["merchant_met_customer_30d"].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


@hypothesis_settings(max_examples=40, deadline=None)
@given(events=TEXT_STREAMS)
def test_novelty_and_variety_backfill_equals_brute_force_and_the_online_computation(
        paired: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, str | None]]) -> None:
    frame = text_frame(events)
    got = backfilled(frame, paired, tmp_path_factory.mktemp("texts"))
    assert_features_equal(got, brute_force(frame, paired))
    assert_features_equal(got, replay_features(frame.sample(frac=1.0, random_state=0), paired).loc[frame.index])


@pytest.fixture(scope="module")
def paired_online(paired: DataContract, tmp_path_factory: pytest.TempPathFactory) -> OnlineFeatures:
    settings = Settings(home=tmp_path_factory.mktemp("paired-online"))
    return OnlineFeatures(FeastOnlineRows(publish_features(text_frame([("seed", "seed", timedelta(0), "pos")]),
                                                           paired, settings)), paired)


@hypothesis_settings(max_examples=25, deadline=None)
@given(events=TEXT_STREAMS, seed=st.integers(0, 2**16), cuts=st.sets(st.integers(1, 40), max_size=6))
def test_novelty_and_variety_through_the_online_store_match_brute_force(
        paired: DataContract, paired_online: OnlineFeatures, events: list[tuple[str, str, timedelta, str | None]],
        seed: int, cuts: set[int]) -> None:
    """Requests in time order (ties in random order), recorded in batches through the SQLite store."""
    frame = text_frame(events, prefix=f"{uuid.uuid4().hex[:8]}-")
    order = sorted(range(len(frame)), key=lambda i: (frame[TS].iloc[i], random.Random(seed + i).random()))
    edges = [0, *sorted(c for c in cuts if c < len(order)), len(order)]
    served: dict[int, dict[str, float]] = {}
    for start, end in itertools.pairwise(edges):
        rows = [frame.iloc[i] for i in order[start:end]]
        texts = ("channel", "customer_id", "merchant_id")
        events_ = [OnlineEvent({e.join_key: str(r[e.join_key]) for e in paired.entities}, r["transaction_id"], r[TS],
                               {"amount": r["amount"]}, {c: canonical_text(r[c], "string") for c in texts})
                   for r in rows]
        seen = paired_online.record_events(events_)
        served.update({i: compute_features(paired, h, r[TS], {**e.values, **e.texts})
                       for i, r, h, e in zip(order[start:end], rows, seen, events_, strict=True)})
    got = pd.DataFrame([served[i] for i in range(len(frame))], index=frame.index)
    assert_features_equal(got, brute_force(frame, paired))


def test_a_stored_history_keeps_each_events_text_and_reads_an_older_one_as_missing(paired: DataContract) -> None:
    view = paired.feature_views[0]
    assert view.text_columns == ["channel", "merchant_id"]
    history = empty_history(view)
    for event_id, t_us, channel in (("b", 20, "pos"), ("a", 10, None)):
        appended = append_event(view, history, event_id, t_us, {"amount": 1.0},
                                texts={"channel": channel, "merchant_id": "m1"})
        assert appended is not None
        history = appended
    assert dict(history.texts) == {"channel": (None, "pos"), "merchant_id": ("m1", "m1")}
    assert decode_history(view, history.encode(view)) == history
    older = decode_history(view, '{"ids":["a"],"times":[10],"values":{"amount":[1.0]}}')  # written before
    assert dict(older.texts) == {"channel": (None,), "merchant_id": (None,)}
    with pytest.raises(ValueError, match="pass the event's texts"):
        append_event(view, empty_history(view), "c", 30, {"amount": 1.0})
    with pytest.raises(ValueError, match="compares the current value of 'channel'"):
        compute_features(paired, {}, BASE, {"amount": 1.0})  # the amount given, the channel not


@hypothesis_settings(max_examples=20, deadline=None)
@given(events=st.lists(st.tuples(st.integers(1, 3), st.integers(7, 9), _WIDE_OFFSETS), min_size=1, max_size=25))
def test_integer_keys_compare_as_their_digits(tmp_path_factory: pytest.TempPathFactory,
                                              events: list[tuple[int, int, timedelta]]) -> None:
    """Integer ids (the terminal-payments contract): a card meets a terminal, whatever the int type."""
    import yaml

    from mlops.settings import BUNDLED_CONTRACT

    raw = yaml.safe_load((BUNDLED_CONTRACT.parent / "terminals.yaml").read_text())
    raw["feature_views"][0]["features"] += [
        {"name": "customer_terminals_1d", "agg": "distinct_count", "column": "TERMINAL_ID", "window": "1d"},
        {"name": "customer_met_terminal_7d", "agg": "pair_seen", "column": "TERMINAL_ID", "window": "7d"},
        {"name": "customer_terminal_gap_1d", "agg": "pair_seconds_since_previous", "column": "TERMINAL_ID",
         "window": "1d"}]
    terminals = DataContract.model_validate(raw)
    frame = pd.DataFrame([{"TRANSACTION_ID": i, "TX_DATETIME": BASE + offset, "CUSTOMER_ID": c, "TERMINAL_ID": t,
                           "TX_AMOUNT": 5.0, "TX_FRAUD": 0} for i, (c, t, offset) in enumerate(events)])
    folder = tmp_path_factory.mktemp("terminals")
    frame.to_parquet(folder / "raw.parquet", index=False)
    DUCKDB.backfill(folder / "raw.parquet", folder / "out.parquet", terminals)
    got = pd.read_parquet(folder / "out.parquet").set_index("TRANSACTION_ID").loc[frame["TRANSACTION_ID"]]
    names = ["customer_terminals_1d", "customer_met_terminal_7d", "customer_terminal_gap_1d"]
    replayed = replay_features(frame.astype({"TERMINAL_ID": "float64"}), terminals)  # 7.0 is terminal 7 too
    brute = pd.DataFrame([{n: text_feature(f, frame[frame["CUSTOMER_ID"] == row["CUSTOMER_ID"]].rename(
        columns={"TX_DATETIME": TS}), row.rename({"TX_DATETIME": TS}), terminals)
        for n, f in ((f.name, f) for f in terminals.feature_views[0].features if f.name in names)}
        for _, row in frame.iterrows()], index=frame.index)
    assert_features_equal(got[names].set_axis(frame.index), brute[names])
    assert_features_equal(replayed[names], brute[names])


@hypothesis_settings(max_examples=20, deadline=None)
@given(events=TEXT_STREAMS, cut=st.integers(min_value=0, max_value=29))
def test_newest_state_keeps_the_texts_the_write_through_keeps(
        paired: DataContract, tmp_path_factory: pytest.TempPathFactory,
        events: list[tuple[str, str, timedelta, str | None]], cut: int) -> None:
    """Materialization (the newest state from the offline table) holds each event's texts as the
    write-through does, so the online pair features go on from it exactly."""
    frame = text_frame(events)
    end = sorted(frame[TS])[min(cut, len(frame) - 1)]
    folder = tmp_path_factory.mktemp("text-state")
    frame.to_parquet(folder / "offline.parquet", index=False)
    for view in paired.feature_views:
        key = paired.entity(view.entity).join_key
        expected: dict[str, History] = {}
        for _, row in frame[frame[TS] <= end].iterrows():
            history = expected.get(row[key], empty_history(view))
            expected[row[key]] = append_event(view, history, row["transaction_id"], to_micros(row[TS]),
                                              {"amount": float(row["amount"])},
                                              texts={c: canonical_text(row[c], "string")
                                                     for c in view.text_columns}) or history
        got = dict(pair for b in DUCKDB.latest_histories(folder / "offline.parquet", paired, view, end.to_pydatetime(),
                                                  None, batch=2) for pair in b)
        assert got == expected
