"""Events that arrive out of time order: whether a history can answer one exactly, and a retry's
first copy.

A history answers at time t from the events before t only (:func:`mlops.features.compute_features`),
so an event later than events the history already holds is answered as the offline store answers
it, provided the history still holds every event its features reach back to. It holds every event
from its ``complete_from`` on (the horizon plus the lateness allowance before its newest event), so:

- the aggregating features need it complete over [t - horizon, t);
- ``seconds_since_previous`` (capped at its window, and not part of the horizon) needs the event
  just before t: known when the history is complete over [t - window, t), or when it holds an
  event in [complete_from, t) (the latest such one is then the previous event).

A retry (an event id the history already holds) is answered at its first copy's time.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import timedelta

from mlops.contract import FeatureViewSpec
from mlops.histories import History

_MICROS = 1_000_000


def _micros(delta: timedelta) -> int:
    return int(delta.total_seconds() * _MICROS)


def exact_at(view: FeatureViewSpec, history: History, t_us: int) -> bool:
    """Whether ``history`` holds every event the view's features at ``t_us`` aggregate."""
    complete_from = history.complete_from
    if complete_from is None:  # nothing ever pruned: every event given is there
        return True
    if t_us - _micros(view.history_horizon) < complete_from:
        return False
    gaps = [_micros(f.window_delta) for f in view.features if f.agg == "seconds_since_previous"]
    if all(t_us - gap >= complete_from for gap in gaps):
        return True
    return bisect_left(history.times, t_us) > bisect_left(history.times, complete_from)


def first_copy_time(history: History, event_id: str) -> int | None:
    """The time (microseconds) of the kept event with this id, or None when the history has none."""
    try:
        return history.times[history.ids.index(event_id)]
    except ValueError:
        return None

