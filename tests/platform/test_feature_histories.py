"""Feature histories by hand, on the terminal-payments contract (integer ids, a view with label
features): the labels materialization brings to an online history, stored histories with labels
read back in order, and integer keys compared as their digits whatever type a request carries."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
import yaml
from hypothesis import example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from mlops.contract import DataContract, FeatureSpec, FeatureViewSpec
from mlops.contracts import BUNDLED_CONTRACT
from mlops.feature_replay import replay_features
from mlops.features import canonical_text, compute_features, to_micros
from mlops.histories import History, append_event, decode_history, empty_history, merge_histories, set_labels

pytestmark = pytest.mark.unit

BASE = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
HOUR = 3_600_000_000
# The card's variety of terminals and whether it met this one, read from the integer TERMINAL_ID.
TERMINAL_FEATURES = [
    {"name": "customer_terminals_1d", "agg": "distinct_count", "column": "TERMINAL_ID", "window": "1d"},
    {"name": "customer_met_terminal_7d", "agg": "pair_seen", "column": "TERMINAL_ID", "window": "7d"},
]


@pytest.fixture(scope="module")
def terminals() -> DataContract:
    raw = yaml.safe_load((BUNDLED_CONTRACT.parent / "terminals.yaml").read_text())
    raw["feature_views"][0]["features"] += TERMINAL_FEATURES
    return DataContract.model_validate(raw)


def _views(contract: DataContract) -> tuple[FeatureViewSpec, FeatureViewSpec]:
    customer, terminal = contract.feature_views
    assert (customer.text_columns, customer.uses_labels) == (["TERMINAL_ID"], False)
    assert (terminal.value_columns, terminal.uses_labels) == ([], True)
    return customer, terminal


def _labelled(view: FeatureViewSpec, events: list[tuple[str, int, float | None]]) -> History:
    """A label view's history of (id, time, label or None: not delivered) events."""
    history = empty_history(view)
    for event_id, t_us, label in events:
        appended = append_event(view, history, event_id, t_us, {}, label)
        assert appended is not None
        history = appended
    return history


def _labels(history: History) -> list[float | None]:
    return [None if math.isnan(label) else label for label in history.labels]


def test_materializing_brings_the_labels_the_online_history_does_not_know(terminals: DataContract) -> None:
    _, view = _views(terminals)
    t0 = to_micros(BASE)
    # Served online: no label for "a" and "c" yet, "b" delivered as legit.
    online = _labelled(view, [("a", t0, None), ("b", t0 + HOUR, 0.0), ("c", t0 + 2 * HOUR, None)])
    # The offline table knows an older event and the labels of "a" and "b" (b's differs), not c's.
    offline = _labelled(view, [("z", t0 - HOUR, 1.0), ("a", t0, 1.0), ("b", t0 + HOUR, 1.0),
                               ("c", t0 + 2 * HOUR, None)])
    merged = merge_histories(view, online, offline)
    assert merged.ids == ("z", "a", "b", "c")
    assert _labels(merged) == [1.0, 1.0, 0.0, None]  # b keeps the label delivered online
    # terminal_fraud_count_1d at t counts the delivered frauds of [t - 8 d, t - 7 d): z and a.
    moment, own = BASE + timedelta(days=7, hours=3), {"TX_AMOUNT": 5.0, "TERMINAL_ID": 7}
    assert compute_features(terminals, {view.view_name: merged}, moment, own)["terminal_fraud_count_1d"] == 2.0
    assert compute_features(terminals, {view.view_name: online}, moment, own)["terminal_fraud_count_1d"] == 0.0
    assert merge_histories(view, merged, offline) == merged  # materializing again changes nothing
    assert merge_histories(view, online, empty_history(view)) == online


def test_merging_nothing_gives_nothing_whatever_the_view_keeps(terminals: DataContract) -> None:
    for view in _views(terminals):  # one keeps texts, the other labels
        assert merge_histories(view, empty_history(view), empty_history(view)) == empty_history(view)


def test_a_stored_labelled_history_reads_back_in_time_then_id_order(terminals: DataContract) -> None:
    _, view = _views(terminals)
    # Written out of order, the two events of instant 20 in reverse id order; a's label not delivered.
    history = decode_history(view, '{"ids":["c","b","a"],"times":[20,20,10],"values":{},"labels":[0,1,null]}')
    assert (history.ids, history.times, _labels(history)) == (("a", "b", "c"), (10, 20, 20), [None, 1.0, 0.0])
    again = decode_history(view, history.encode(view))
    assert (again.ids, again.times, _labels(again)) == (history.ids, history.times, _labels(history))
    # Written before the view had label features: every label is unknown.
    older = decode_history(view, '{"ids":["a","b"],"times":[10,20],"values":{}}')
    assert (older.ids, _labels(older)) == (("a", "b"), [None, None])


def test_integer_keys_are_met_as_their_digits(terminals: DataContract) -> None:
    customer, _ = _views(terminals)
    # Read from Parquet with a missing value elsewhere, the int column is float64: 7.0 is terminal 7.
    frame = pd.DataFrame({"TRANSACTION_ID": [1, 2, 3], "CUSTOMER_ID": [5, 5, 5],
                          "TX_DATETIME": [BASE, BASE + timedelta(hours=1), BASE + timedelta(hours=2)],
                          "TERMINAL_ID": [7.0, 8.0, 7.0], "TX_AMOUNT": [5.0, 5.0, 5.0], "TX_FRAUD": [0, 0, 0]})
    replayed = replay_features(frame, terminals)
    assert replayed["customer_terminals_1d"].tolist() == [0.0, 1.0, 2.0]
    assert replayed["customer_met_terminal_7d"].tolist() == [0.0, 0.0, 1.0]
    history = empty_history(customer)
    for event_id, hours, terminal in (("1", 0, 7), ("2", 1, 8)):  # written from an int64 column
        appended = append_event(customer, history, event_id, to_micros(BASE) + hours * HOUR, {"TX_AMOUNT": 5.0},
                                texts={"TERMINAL_ID": canonical_text(terminal, "int")})
        assert appended is not None
        history = appended
    assert history.texts["TERMINAL_ID"] == ("7", "8")
    later = BASE + timedelta(hours=2)
    for own, met in ((7, 1.0), (7.0, 1.0), ("7", 1.0), (9, 0.0), (None, 0.0), (math.nan, 0.0)):
        features = compute_features(terminals, {customer.view_name: history}, later,
                                    {"TX_AMOUNT": 5.0, "TERMINAL_ID": own})
        assert (features["customer_met_terminal_7d"], features["customer_terminals_1d"]) == (met, 2.0), own
    with pytest.raises(ValueError, match="'TERMINAL_ID': pass the event's own values as current"):
        compute_features(terminals, {customer.view_name: history}, later, {"TX_AMOUNT": 5.0})


def test_delivered_labels_change_a_history_once_and_keep_its_values_and_texts() -> None:
    """What ``mlops labels ingest`` writes back: None (nothing to write) for a label delivered again,
    an event no longer kept or a view without label features."""
    view = FeatureViewSpec(entity="customer", features=(
        FeatureSpec(name="amount_sum_1h", agg="sum", column="amount", window="1h"),
        FeatureSpec(name="merchants_1d", agg="distinct_count", column="merchant_id", window="1d"),
        FeatureSpec(name="fraud_count_1d", agg="label_count", window="1d", delay="1h")))
    history = empty_history(view)
    for event_id, t_us, amount, merchant in (("a", 10, 2.0, "m1"), ("b", 20, 3.0, "m2")):
        appended = append_event(view, history, event_id, t_us, {"amount": amount}, None, {"merchant_id": merchant})
        assert appended is not None
        history = appended
    labelled = set_labels(view, history, {"a": 1, "gone": 0.0})
    assert labelled is not None
    assert (labelled.ids, labelled.times, _labels(labelled)) == (("a", "b"), (10, 20), [1.0, None])
    assert (dict(labelled.values), dict(labelled.texts)) == ({"amount": (2.0, 3.0)}, {"merchant_id": ("m1", "m2")})
    assert set_labels(view, labelled, {"a": 1.0}) is None  # delivered again
    assert set_labels(view, labelled, {"gone": 1.0}) is None  # no longer kept
    unlabelled = FeatureViewSpec(entity="customer", features=view.features[:1])
    assert set_labels(unlabelled, empty_history(unlabelled), {"a": 1.0}) is None


def _nth(view: FeatureViewSpec, history: History, n: int, hours: int, label: float | None,
         lateness_us: int) -> History | None:
    """``history`` with its ``n``-th event, at ``hours``, and that event's first answer."""
    return append_event(view, history, f"e{n:03d}", hours * HOUR, {c: float(n) for c in view.value_columns}, label,
                        {c: f"x{n % 3}" for c in view.text_columns}, lateness_us=lateness_us,
                        answer=(float(n), float(hours)))


@hypothesis_settings(max_examples=60, deadline=None)
@given(times=st.lists(st.integers(0, 30 * 24), min_size=1, max_size=40), lateness_hours=st.integers(0, 48),
       labels=st.lists(st.sampled_from([0.0, 1.0, None]), min_size=40, max_size=40),
       bound_hours=st.none() | st.integers(0, 30 * 24))
# The oldest event exactly at the cut: nothing is cut off, so the history stays unbounded.
@example(times=[0, 30 * 24], lateness_hours=0, labels=[None] * 40, bound_hours=None)
# A bound above every cut (materialized from a store that kept less): appending keeps it.
@example(times=[0, 24, 48], lateness_hours=0, labels=[None] * 40, bound_hours=30 * 24)
def test_appending_the_newest_event_is_the_general_insert(
        contract: DataContract, terminals: DataContract, times: list[int], lateness_hours: int,
        labels: list[float | None], bound_hours: int | None) -> None:
    """Appending in time order takes the column-wise path; merging one event at a time takes the
    general one (every event sorted, then pruned): both give the same history, with its bound,
    labels, texts and first answers, for a view with text columns and one with labels, from a
    history complete from ``bound_hours`` or never pruned."""
    bound = None if bound_hours is None else bound_hours * HOUR
    for view in (*contract.feature_views, *terminals.feature_views):
        appended = merged = replace(empty_history(view), complete_from=bound)
        for n, hours in enumerate(sorted(times)):
            appended = _nth(view, appended, n, hours, labels[n], lateness_hours * HOUR) or appended
            one = _nth(view, empty_history(view), n, hours, labels[n], 0)
            assert one is not None
            merged = merge_histories(view, merged, one, lateness_us=lateness_hours * HOUR)
        assert (appended.ids, appended.times, appended.complete_from) == (merged.ids, merged.times,
                                                                          merged.complete_from)
        assert (appended.values, appended.texts, appended.answers) == (merged.values, merged.texts, merged.answers)
        assert _labels(appended) == _labels(merged)


def test_a_late_event_keeps_the_bound_of_the_history_it_joins(contract: DataContract) -> None:
    """An event inserted before the newest (the general path) into a history complete from some time on
    keeps that bound: nothing older came back with it."""
    view = contract.feature_views[0]
    history = replace(_nth(view, _nth(view, empty_history(view), 1, 10, None, 0) or empty_history(view),
                           2, 20, None, 0) or empty_history(view), complete_from=5 * HOUR)
    late = _nth(view, history, 3, 15, None, 0)
    assert late is not None
    assert late.ids == ("e001", "e003", "e002")
    assert late.complete_from == 5 * HOUR
