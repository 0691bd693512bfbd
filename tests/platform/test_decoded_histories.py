"""The decoded histories a process keeps: a read of the text it kept is that history, any other
text is decoded, and the memo stays within its bound of events."""

from __future__ import annotations

import pytest

from mlops.contract import DataContract, FeatureViewSpec
from mlops.decoded_histories import DecodedHistories
from mlops.histories import History, append_event, decode_history, empty_history

pytestmark = pytest.mark.unit

HOUR_US = 3_600_000_000


def _history(view: FeatureViewSpec, events: int, prefix: str = "t") -> History:
    history = empty_history(view)
    for n in range(events):
        history = append_event(view, history, f"{prefix}{n}", n * HOUR_US, {"amount": float(n)},
                               texts={c: "x" for c in view.text_columns}) or history
    return history


@pytest.fixture
def view(contract: DataContract) -> FeatureViewSpec:
    return contract.feature_views[0]


def test_the_kept_text_reads_as_its_history_and_another_text_is_decoded(view: FeatureViewSpec) -> None:
    memo = DecodedHistories(min_events=1)
    mine, theirs = _history(view, 3), _history(view, 4)
    memo.keep(view, "c1", mine.encode(view), mine)
    assert memo.decode(view, "c1", mine.encode(view)) is mine  # no decode: the very object kept
    other = memo.decode(view, "c1", theirs.encode(view))  # another worker wrote c1 since
    assert other == theirs
    assert other is not theirs
    assert memo.decode(view, "c1", theirs.encode(view)) is other  # kept in its place
    assert memo.decode(view, "c2", mine.encode(view)) is not mine  # per entity: c2 never kept this text
    assert memo.decode(view, "c3", None) == empty_history(view)
    assert (len(memo), memo.events) == (2, 7)  # c1: 4 events, c2: 3


def test_the_memo_holds_at_most_its_events_least_recently_used_out(view: FeatureViewSpec) -> None:
    memo = DecodedHistories(max_events=10, min_events=1)
    histories = {f"c{n}": _history(view, 4, prefix=f"c{n}-") for n in range(3)}
    texts = {entity: history.encode(view) for entity, history in histories.items()}
    memo.keep(view, "c0", texts["c0"], histories["c0"])
    memo.keep(view, "c1", texts["c1"], histories["c1"])
    assert memo.decode(view, "c0", texts["c0"]) is histories["c0"]  # c0 now used after c1
    memo.keep(view, "c2", texts["c2"], histories["c2"])  # 12 events > 10: c1 goes
    assert (len(memo), memo.events) == (2, 8)
    assert memo.decode(view, "c1", texts["c1"]) is not histories["c1"]
    memo.keep(view, "big", _history(view, 11).encode(view), _history(view, 11))  # over the bound alone
    assert memo.decode(view, "big", _history(view, 11).encode(view)) == decode_history(view, _history(view, 11)
                                                                                      .encode(view))
    assert memo.events <= 10


def test_a_short_history_is_decoded_each_time_and_a_long_one_kept(view: FeatureViewSpec) -> None:
    memo = DecodedHistories(min_events=8)
    short, long = _history(view, 7), _history(view, 8)
    memo.keep(view, "card", short.encode(view), short)
    memo.keep(view, "merchant", long.encode(view), long)
    assert memo.decode(view, "card", short.encode(view)) is not short
    assert memo.decode(view, "merchant", long.encode(view)) is long
    assert (len(memo), memo.events) == (1, 8)
