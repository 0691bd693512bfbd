"""Late and retried events through the online SQLite store: any arrival order gives each event the
offline store's point-in-time features, for every feature family; a retry gets its first answer;
an event older than the histories reach is flagged, never silently wrong."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import cast

import pandas as pd
import pytest
from feature_oracle import log_served, stream_frame
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from late_arrivals import EVENTS, Event, arrivals, check_arrivals, events_frame, every_family

from feature_repo.online import open_online_features
from feature_repo.store import publish_features
from mlops.contract import DataContract
from mlops.decoded_histories import DecodedHistories
from mlops.feature_replay import replay_features
from mlops.histories import append_event, empty_history, kept_from, merge_histories
from mlops.late_events import exact_at
from mlops.online_features import LabelledEvent, OnlineEvent, OnlineFeatures, SeenEvent
from mlops.settings import Settings
from mlops.sqlite_online import SqliteOnlineRows

pytestmark = pytest.mark.unit

DAY = timedelta(days=1)
# The streams span 40 days: an allowance beyond that keeps every arrival order exact.
EVERYTHING_KEPT = 41 * DAY


@pytest.fixture(scope="module")
def families(contract: DataContract) -> DataContract:
    return every_family(contract)


def _sqlite_online(families: DataContract, home: object, allowance: timedelta) -> OnlineFeatures:
    settings = Settings(home=home, late_event_allowance_s=allowance.total_seconds())
    publish_features(events_frame([("seed", "seed", timedelta(0), 1.0, "pos", 0)], "seed-"), families, settings)
    return open_online_features(settings, families)


@pytest.fixture(scope="module")
def online(families: DataContract, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnlineFeatures]:
    store = _sqlite_online(families, tmp_path_factory.mktemp("late"), EVERYTHING_KEPT)
    yield store
    store.close()


@pytest.fixture(scope="module")
def tight_online(families: DataContract, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OnlineFeatures]:
    """No lateness allowance: the histories keep the longest window before their newest event only."""
    store = _sqlite_online(families, tmp_path_factory.mktemp("tight"), timedelta(0))
    yield store
    store.close()


@hypothesis_settings(max_examples=12, deadline=None)
@given(data=st.data(), events=EVENTS)
def test_any_arrival_order_gets_the_offline_features_and_retries_their_first_answer(
        families: DataContract, online: OnlineFeatures, data: st.DataObject, events: list[Event]) -> None:
    check_arrivals(online, families, events, data.draw(arrivals(len(events))), exact_only=True)


@hypothesis_settings(max_examples=12, deadline=None)
@given(data=st.data(), events=EVENTS)
def test_without_an_allowance_every_answer_flagged_exact_is_exact(
        families: DataContract, tight_online: OnlineFeatures, data: st.DataObject, events: list[Event]) -> None:
    check_arrivals(tight_online, families, events, data.draw(arrivals(len(events))), exact_only=False)


def test_in_time_order_is_always_exact(families: DataContract, tight_online: OnlineFeatures) -> None:
    days = (0, 3, 9, 40, 41, 80)
    check_arrivals(tight_online, families, [("c1", "m1", d * DAY, 10.0, "pos", 0) for d in days],
                   list(range(len(days))), exact_only=True)


def test_an_event_older_than_the_reach_is_flagged(contract: DataContract) -> None:
    """The bundled customer view reaches 7 days back: with a 1-day allowance, an event 1 day older
    than the newest is exact and one 1.5 days older is not (its 7-day mean could miss a dropped event)."""
    [view, _] = contract.feature_views
    day_us = 86_400_000_000
    history = empty_history(view)
    for event_id, day in (("a", 0), ("b", 5), ("c", 10)):
        history = append_event(view, history, event_id, day * day_us, {"amount": 1.0}, lateness_us=day_us) or history
    assert history.ids == ("b", "c")  # "a": more than 7 + 1 days before "c"
    assert history.complete_from == 2 * day_us
    assert exact_at(view, history, 9 * day_us)  # its 7 days [2 d, 9 d) are all held
    assert not exact_at(view, history, 8 * day_us + day_us // 2)  # [1.5 d, 8.5 d) reaches past what is held
    assert exact_at(view, history, 11 * day_us)  # in time order: always exact
    assert not exact_at(view, history, 4 * day_us)  # also the previous event: nothing held before it


def test_where_a_history_is_complete_from_does_not_depend_on_the_arrival_order(contract: DataContract) -> None:
    """7-day reach, 1-day allowance. In time order "b" cuts "x" off (complete from day -1) and "c" moves the
    cut to day 0 with nothing older left to cut; with "x" arriving last, "c"'s cut drops it. Both hold the
    same events, complete from the same time: the newest cut, what materialization computes."""
    [view, _] = contract.feature_views
    day_us = 86_400_000_000
    events = {"x": -3 * day_us // 2, "a": 0, "b": 7 * day_us, "c": 8 * day_us}
    histories = []
    for order in (("x", "a", "b", "c"), ("a", "b", "c", "x")):
        history = empty_history(view)
        for event_id in order:
            history = append_event(view, history, event_id, events[event_id], {"amount": 1.0},
                                   lateness_us=day_us) or history
        histories.append(history)
    in_order, late = histories
    assert in_order == late
    assert in_order.ids == ("a", "b", "c")
    assert in_order.complete_from == kept_from(view, [events["a"], events["b"], events["c"]], day_us) == 0


def test_a_merge_keeps_where_each_side_is_complete_from_and_every_first_answer(contract: DataContract) -> None:
    """Materialization merges the offline history into the served one: the union is complete only from
    where both are (the later bound), and a retry after the merge still gets its event's first answer."""
    [view, _] = contract.feature_views
    day_us = 86_400_000_000
    served = empty_history(view)
    for event_id, t_us in (("s1", 0), ("s2", 8 * day_us), ("s3", 17 * day_us // 2)):  # "s3" cuts "s1" off
        served = append_event(view, served, event_id, t_us, {"amount": 1.0}, answer=(float(t_us),)) or served
    offline = append_event(view, empty_history(view), "o1", 5 * day_us, {"amount": 2.0}, answer=(5.0,))
    assert offline is not None
    assert (served.ids, served.complete_from) == (("s2", "s3"), 3 * day_us // 2)
    merged = merge_histories(view, served, offline)  # nothing more to cut: the bound is the served one's
    assert merged.ids == ("o1", "s2", "s3")
    assert merged.complete_from == 3 * day_us // 2
    assert merged.answers == {"o1": (5.0,), "s2": (float(8 * day_us),), "s3": (float(17 * day_us // 2),)}


def test_histories_stay_small_with_the_allowance(families: DataContract) -> None:
    """The allowance keeps a day more of events: for a card with an event an hour over 60 days, the
    customer history holds the longest reach (7 days) plus a day."""
    view = families.feature_views[0]
    hour_us = 3_600_000_000
    sizes = {}
    for allowance_days in (0, 1):
        history = empty_history(view)
        for n in range(60 * 24):
            history = append_event(view, history, f"t{n}", n * hour_us, {"amount": 1.0},
                                   texts={c: "x" for c in view.text_columns},
                                   lateness_us=allowance_days * 24 * hour_us) or history
        sizes[allowance_days] = len(history)
    assert sizes == {0: 7 * 24 + 1, 1: 8 * 24 + 1}
    pd.testing.assert_index_equal(pd.Index([0, 1]), pd.Index(sorted(sizes)))


def test_the_skew_check_counts_answers_flagged_inexact_apart(contract: DataContract, tmp_path: Path) -> None:
    """A prediction the service flagged inexact is reported as such, not as skew; one it did not flag
    and got wrong still is."""
    from mlops.feature_skew import check_skew

    settings = Settings(home=tmp_path)
    frame = stream_frame([("c1", "m1", timedelta(hours=h), 10.0) for h in range(4)])
    publish_features(frame, contract, settings)
    served = replay_features(frame, contract)
    served.loc[served.index[-2:], "customer_txn_count_1h"] += 1  # the last two answers were wrong ...
    log_served(settings, frame, served, ["amount"], exact=[True, True, True, False])  # ... the last one flagged
    report = check_skew(settings, contract, sample=4, tolerance=1e-9)
    assert (report.compared, report.flagged_inexact, report.differing) == (4, 1, 1)


class _TwoWorkers:
    """Two services' online features on one store, each request recorded by either: each keeps
    its own decoded histories, so each must notice what the other wrote in between."""

    def __init__(self, first: OnlineFeatures, second: OnlineFeatures, picks: list[bool]) -> None:
        self.workers, self.picks = (first, second), iter(picks)

    def _next(self) -> OnlineFeatures:
        return self.workers[next(self.picks, False)]

    def record_events(self, events: list[OnlineEvent]) -> list[SeenEvent]:
        return self._next().record_events(events)

    def record_labels(self, events: list[LabelledEvent]) -> int:
        return self._next().record_labels(events)


@pytest.fixture(scope="module")
def two_workers(families: DataContract, online: OnlineFeatures) -> Iterator[tuple[OnlineFeatures, OnlineFeatures]]:
    """Two processes' views of ``online``'s store: the same file, each its own connections and decoded
    histories, kept from the first event on (the service keeps only long ones)."""
    path, project = online.rows.path, online.rows.project  # type: ignore[attr-defined]
    workers = tuple(OnlineFeatures(SqliteOnlineRows(path, project), families, lateness=EVERYTHING_KEPT,
                                   decoded=DecodedHistories(min_events=1)) for _ in range(2))
    yield workers[0], workers[1]
    for worker in workers:
        worker.close()


@hypothesis_settings(max_examples=12, deadline=None)
@given(data=st.data(), events=EVENTS)
def test_two_workers_taking_turns_on_one_store_answer_as_the_offline_store(
        families: DataContract, two_workers: tuple[OnlineFeatures, OnlineFeatures],
        data: st.DataObject, events: list[Event]) -> None:
    order = data.draw(arrivals(len(events)))
    picks = data.draw(st.lists(st.booleans(), min_size=2 * len(order), max_size=2 * len(order)))
    check_arrivals(cast(OnlineFeatures, _TwoWorkers(*two_workers, picks)), families, events, order,
                   exact_only=True)
