"""Events served in any arrival order, with retries, against the offline definition: what the
late-event tests (SQLite and Redis) share.

The offline store answers an event from the events it holds before the event's time; when the
event is served, the store holds the events that have arrived so far. So each served answer is
compared with the brute force over the events arrived up to it (labels included: each event's label
is delivered right after its answer), whatever their times. A retry must get its first answer back,
unless its first copy is no longer held (older than the histories reach): then it is flagged inexact.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pandas as pd
from feature_oracle import (
    CURRENT_VALUE_FEATURES,
    LABEL_FEATURES,
    TEXT_FEATURES,
    TS,
    WIDE_OFFSETS,
    assert_scores_equal,
    brute_force,
    stream_frame,
    with_features,
)
from hypothesis import strategies as st

from mlops.contract import DataContract
from mlops.features import canonical_text
from mlops.online_features import LabelledEvent, OnlineEvent, OnlineFeatures

TEXTS = ("channel", "customer_id", "merchant_id")
# Every family at once: windows, means, ratios and z-scores, seconds since previous, delayed labels, novelty.
Event = tuple[str, str, timedelta, float, str | None, int]  # customer, merchant, offset, amount, channel, label
EVENTS = st.lists(st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["m1", "m2"]), WIDE_OFFSETS,
                            st.sampled_from([5.0, 12.5, 40.0]), st.sampled_from(["pos", "online", None]),
                            st.sampled_from([0, 1])), min_size=1, max_size=14)


def every_family(contract: DataContract) -> DataContract:
    """``contract`` with label, current-value and text features beside its own windows."""
    return with_features(contract, {entity: [*LABEL_FEATURES[entity], *CURRENT_VALUE_FEATURES[entity],
                                             *TEXT_FEATURES[entity]] for entity in LABEL_FEATURES})


def events_frame(events: list[Event], prefix: str) -> pd.DataFrame:
    frame = stream_frame([(c, m, offset, amount) for c, m, offset, amount, _, _ in events], prefix)
    return frame.assign(channel=pd.Series([e[4] for e in events], dtype="object"),
                        is_fraud=[e[5] for e in events])


@st.composite
def arrivals(draw: st.DrawFn, size: int) -> list[int]:
    """A permutation of ``range(size)`` with a few retries, each somewhere after its first copy."""
    order: list[int] = draw(st.permutations(range(size)))
    for index in draw(st.lists(st.integers(0, size - 1), max_size=3)):
        first = order.index(index)
        order.insert(draw(st.integers(first + 1, len(order))), index)
    return order


def serve_in_arrival_order(online: OnlineFeatures, contract: DataContract, frame: pd.DataFrame,
                           order: list[int], *, exact_only: bool) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """Serve ``frame``'s rows in ``order`` (one request each): the answers of the first copies,
    the brute force over the rows arrived up to each, and whether each first copy was exact.
    A retry, sent an hour after its first copy's time, must get the first answer at that time
    (``exact_only``: every retry must; otherwise one flagged inexact is let through)."""
    first: dict[int, dict[str, float]] = {}
    expected: dict[int, pd.Series] = {}
    exact: dict[int, bool] = {}
    arrived: list[int] = []
    for index in order:
        row = frame.iloc[index]
        keys = {e.join_key: str(row[e.join_key]) for e in contract.entities}
        retry = index in first
        moment = row[TS] + timedelta(hours=1) if retry else row[TS]
        event = OnlineEvent(keys, row["transaction_id"], moment, {"amount": float(row["amount"])},
                            {c: canonical_text(row[c], "string") for c in TEXTS})
        [seen] = online.record_events([event])
        if retry:
            # Once the first copy is pruned (older than the reach), the retry cannot be answered as it was.
            assert seen.exact or not exact_only
            if seen.exact:
                assert seen.retry
                assert seen.features == first[index]
                assert seen.moment == row[TS]
            continue
        assert not seen.retry
        arrived.append(index)
        first[index] = seen.features
        exact[index] = seen.exact
        expected[index] = brute_force(frame.iloc[arrived], contract, only=frame.index[[index]]).iloc[0]
        online.record_labels([LabelledEvent(keys, row["transaction_id"], float(row["is_fraud"]))])
    got = pd.DataFrame.from_dict(first, orient="index", columns=contract.feature_names).sort_index()
    wanted = pd.DataFrame(expected).T[contract.feature_names].astype("float64").sort_index()
    return got, wanted, pd.Series(exact).sort_index()



def check_arrivals(online: OnlineFeatures, contract: DataContract, events: list[Event], order: list[int], *,
                   exact_only: bool) -> None:
    """``events`` served in ``order``: every answer flagged exact (``exact_only``: every answer)
    equals the offline definition, and every retry gets its first answer (see :func:`serve_in_arrival_order`)."""
    frame = events_frame(events, prefix=f"{uuid.uuid4().hex[:8]}-")
    got, expected, exact = serve_in_arrival_order(online, contract, frame, order, exact_only=exact_only)
    assert exact.all() or not exact_only
    assert_scores_equal(got[exact], expected[exact])
