"""Novelty and variety features (distinct values, whether and how long ago a pair met) against the
brute force, offline and online, with integer keys compared as their digits."""

from __future__ import annotations

import itertools
import random
import uuid
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest
from feature_oracle import (
    BASE,
    DAY,
    DUCKDB,
    LATENESS_US,
    TS,
    WIDE_OFFSETS,
    assert_features_equal,
    backfilled,
    brute_force,
    stream_frame,
    text_feature,
    text_rows,
    with_text_features,
)
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from feature_repo.store import FeastOnlineRows, publish_features
from mlops.contract import DataContract
from mlops.feature_replay import replay_features
from mlops.features import canonical_text, compute_features, to_micros
from mlops.histories import History, append_event, decode_history, empty_history
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.settings import Settings

pytestmark = pytest.mark.unit


TEXT_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2", "m3"]),
                                  WIDE_OFFSETS, st.sampled_from(["pos", "online", "atm", None])),
                        min_size=1, max_size=30)  # a missing channel is no value: never counted, never met


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
                        ("c1", "m2", 2 * half + DAY, "pos"),  # exactly 24 h after m1's last: m1 still in
                        ("c1", "m1", 2 * half + 8 * DAY, "pos")])  # beyond 7 d: the pair is new again
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
        served.update({i: compute_features(paired, h.histories, r[TS], {**e.values, **e.texts})
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
@given(events=st.lists(st.tuples(st.integers(1, 3), st.integers(7, 9), WIDE_OFFSETS), min_size=1, max_size=25))
def test_integer_keys_compare_as_their_digits(tmp_path_factory: pytest.TempPathFactory,
                                              events: list[tuple[int, int, timedelta]]) -> None:
    """Integer ids (the terminal-payments contract): a card meets a terminal, whatever the int type."""
    import yaml

    from mlops.contracts import BUNDLED_CONTRACT

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
    rows = text_rows(frame.rename(columns={"TX_DATETIME": TS}))
    brute = pd.DataFrame([{n: text_feature(f, [o for o in rows if o["CUSTOMER_ID"] == row["CUSTOMER_ID"]], row,
                                           terminals)
                           for n, f in ((f.name, f) for f in terminals.feature_views[0].features if f.name in names)}
                          for row in rows], index=frame.index)
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
                                                     for c in view.text_columns}, lateness_us=LATENESS_US) or history
        got = dict(pair for b in DUCKDB.latest_histories(folder / "offline.parquet", paired, view, end.to_pydatetime(),
                                                  None, batch=2) for pair in b)
        assert got == expected
