"""Per-entity event histories: what the online store keeps for each entity, and how it changes.

A history holds an entity's recent events in (time, id) order: id, time, the values of the columns
its feature view aggregates, the key-like columns' texts and, for a view with label features, each
event's label. :func:`append_event` inserts one event where its time puts it, whatever arrived
before (idempotent per id); :func:`merge_histories` unites two (materialization);
:func:`set_labels` delivers labels. :func:`mlops.features.compute_features` reads them.

Pruning keeps the events of the view's horizon (its longest window) and a lateness allowance before
the newest event, plus those of the instant just before the newest, so "seconds since the previous
transaction" stays exact however long ago that was. A history records from when on it holds every
event it was given (``complete_from``), so an event older than that reach is known to be answered
inexactly (:mod:`mlops.late_events`). The first view's history also keeps the features each event
it holds was first answered with, so a retry of the id gets that answer again.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from mlops.contract import FeatureViewSpec

# A history is stored online as one compact JSON string (Redis and SQLite hold strings).
EVENTS_FIELD = "events"
# The time of the history's newest event (microseconds), stored beside it.
NEWEST_FIELD = "newest_event_us"
_IDS, _TIMES, _VALUES, _LABELS = "ids", "times", "values", "labels"  # times: microseconds since the Unix epoch, UTC
_TEXTS = "texts"
_COMPLETE_FROM = "complete_from"
_ANSWERS = "answers"
_MICROS = 1_000_000


@dataclass(frozen=True)
class History:
    """One entity's kept events, ascending by (time, id).

    ``labels`` holds each event's 0/1 label (NaN: not delivered yet) when the view has label
    features, and is empty otherwise; ``texts`` each event's value of the view's text columns
    (canonical text, None when missing). ``complete_from``: every event at or after this time
    (microseconds) that the history was given is still in it; None when nothing was ever pruned.
    ``answers``: the features (in the contract's order) each kept event was first answered with,
    by id; kept in the first feature view's history only (one copy is enough for a retry).
    """

    ids: tuple[str, ...] = ()
    times: tuple[int, ...] = ()
    values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    labels: tuple[float, ...] = ()
    texts: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict)
    complete_from: int | None = None
    answers: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def known_before(self, t_us: int) -> bool:
        """Whether any kept event happened strictly before ``t_us``."""
        return bool(self.times) and self.times[0] < t_us

    def encode(self, view: FeatureViewSpec) -> str:
        """The stored form (compact JSON; floats written as their shortest exact form, so they read back exactly)."""
        stored: dict[str, Any] = {_IDS: self.ids, _TIMES: self.times,
                                  _VALUES: {c: self.values.get(c, ()) for c in view.value_columns}}
        if view.uses_labels:  # an unknown label is null
            stored[_LABELS] = [None if math.isnan(label) else label for label in self.labels]
        if view.text_columns:
            stored[_TEXTS] = {c: self.texts.get(c, ()) for c in view.text_columns}
        stored[_COMPLETE_FROM] = self.complete_from  # null: nothing was ever pruned
        if self.answers:
            stored[_ANSWERS] = self.answers
        return orjson.dumps(stored).decode()


def stored_fields(view: FeatureViewSpec, history: History) -> dict[str, Any]:
    """The fields a non-empty history is stored as (an online value)."""
    return {EVENTS_FIELD: history.encode(view), NEWEST_FIELD: history.times[-1]}


def empty_history(view: FeatureViewSpec) -> History:
    return History(values={c: () for c in view.value_columns}, texts={c: () for c in view.text_columns})


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _label(value: Any) -> float:
    """A stored or delivered label as a float; None (not delivered) is NaN."""
    return math.nan if value is None else float(value)


def decode_history(view: FeatureViewSpec, stored: Any) -> History:
    """A history from its stored form; a missing value (None, NaN) means no events."""
    if not isinstance(stored, str):
        if stored is None or (isinstance(stored, float) and math.isnan(stored)):
            return empty_history(view)
        raise ValueError(f"stored history of {view.view_name} is a {type(stored).__name__}, not JSON text")
    raw = orjson.loads(stored)
    times, ids = list(map(int, raw[_TIMES])), list(map(str, raw[_IDS]))
    values = [list(map(float, raw[_VALUES][c])) for c in view.value_columns]
    # Labels of a view that has label features (a history written before it had one knows none).
    labels = [list(map(_label, raw.get(_LABELS, [None] * len(times))))] if view.uses_labels else []
    # Likewise the values of a text column a history was written without are missing (None).
    stored_texts = raw.get(_TEXTS, {})
    texts = [list(map(_text, stored_texts.get(c, [None] * len(times)))) for c in view.text_columns]
    lengths = {len(times), len(ids), *map(len, values), *map(len, labels), *map(len, texts)}
    if len(lengths) > 1:
        raise ValueError(f"stored history of {view.view_name} has columns of different lengths")
    if not times:
        return empty_history(view)
    # A history written before histories recorded this was pruned to the horizon alone.
    complete_from = raw[_COMPLETE_FROM] if _COMPLETE_FROM in raw else kept_from(view, sorted(times), 0)
    keys = list(zip(times, ids, strict=True))
    if not all(map(operator.lt, keys, keys[1:])):  # written in order; anything else is put in order here
        order = sorted(range(len(keys)), key=keys.__getitem__)
        times, ids = [times[i] for i in order], [ids[i] for i in order]
        values, labels = [[v[i] for i in order] for v in values], [[v[i] for i in order] for v in labels]
        texts = [[v[i] for i in order] for v in texts]
    return History(ids=tuple(ids), times=tuple(times),
                   values={c: tuple(v) for c, v in zip(view.value_columns, values, strict=True)},
                   labels=tuple(labels[0]) if labels else (),
                   texts={c: tuple(v) for c, v in zip(view.text_columns, texts, strict=True)},
                   complete_from=None if complete_from is None else int(complete_from),
                   answers={i: tuple(map(float, a)) for i, a in raw.get(_ANSWERS, {}).items()})


def kept_from(view: FeatureViewSpec, times: Sequence[int], lateness_us: int) -> int:
    """The oldest time a history of these (ascending, not empty) times keeps: the horizon and the
    lateness allowance before the newest event, or the instant before the newest when that is older."""
    newest = times[-1]
    before_newest = bisect_left(times, newest)
    previous = times[before_newest - 1] if before_newest else newest
    return min(previous, newest - int(view.history_horizon.total_seconds() * _MICROS) - lateness_us)


def _pruned(view: FeatureViewSpec, events: list[tuple[Any, ...]], complete_from: int | None, lateness_us: int,
            answers: Mapping[str, tuple[float, ...]], *, in_order: bool = False) -> History:
    """Keep the events from :func:`kept_from` on, and the answers of those. ``complete_from`` is the
    cut once anything was ever cut off (now or before), and stays None while nothing was: so it
    depends on the events only, not on their arrival order, and equals what the offline store's
    newest state (mlops.backfill.latest_state) gives for the same events."""
    if not in_order:
        events.sort()
    if events:
        times = [e[0] for e in events]
        cut = kept_from(view, times, lateness_us)
        if times[0] < cut or complete_from is not None:
            complete_from = cut if complete_from is None else max(complete_from, cut)
        # In time order, the kept events are a suffix: nothing lies between the previous instant and the newest.
        events = events[bisect_left(times, cut):]
    width = 2 + len(view.value_columns) + len(view.text_columns) + view.uses_labels
    columns = list(zip(*events, strict=True)) if events else [()] * width
    first_text = 2 + len(view.value_columns)
    return History(ids=tuple(columns[1]), times=tuple(columns[0]),
                   values={c: tuple(columns[2 + i]) for i, c in enumerate(view.value_columns)},
                   labels=tuple(columns[-1]) if view.uses_labels else (),
                   texts={c: tuple(columns[first_text + i]) for i, c in enumerate(view.text_columns)},
                   complete_from=complete_from,
                   answers={i: answers[i] for i in columns[1] if i in answers} if answers else {})


def _events(view: FeatureViewSpec, history: History) -> list[tuple[Any, ...]]:
    """(time, id, *values, *texts, label if the view keeps labels) per event; ids are unique, so
    sorting never compares the values."""
    labels = [history.labels] if view.uses_labels else []
    return list(zip(history.times, history.ids, *(history.values[c] for c in view.value_columns),
                    *(history.texts[c] for c in view.text_columns), *labels, strict=True))


def append_event(view: FeatureViewSpec, history: History, event_id: str, t_us: int,
                 values: Mapping[str, float], label: float | None = None,
                 texts: Mapping[str, str | None] | None = None, *, lateness_us: int = 0,
                 answer: Sequence[float] | None = None) -> History | None:
    """The history with one more event, inserted in (time, id) order, or None when the id is
    already in it (idempotent).

    ``label``: the event's 0/1 label when known (the offline replay); a served event's is not yet.
    ``texts``: the event's canonical text of each of the view's text columns (:func:`canonical_text`).
    ``lateness_us``: how much further back than the horizon the history keeps events, so that an
    event arriving up to that late is still answered exactly. ``answer``: the features the event
    was answered with, kept for a retry of its id.
    """
    if event_id in history.ids:
        return None
    if view.text_columns and texts is None:
        raise ValueError(f"{view.view_name} keeps {view.text_columns}: pass the event's texts")
    event = (t_us, event_id, *(float(values[c]) for c in view.value_columns),
             *(_text((texts or {})[c]) for c in view.text_columns),
             *([_label(label)] if view.uses_labels else []))
    answers = history.answers if answer is None else {**history.answers, event_id: tuple(answer)}
    if not history.ids or (t_us, event_id) > (history.times[-1], history.ids[-1]):
        return _with_newest(view, history, event, lateness_us, answers)  # the usual case
    events = _events(view, history)
    insort(events, event)
    return _pruned(view, events, history.complete_from, lateness_us, answers, in_order=True)


def _with_newest(view: FeatureViewSpec, history: History, event: tuple[Any, ...], lateness_us: int,
                 answers: Mapping[str, tuple[float, ...]]) -> History:
    """What :func:`_pruned` gives for ``history``'s events and ``event``, the newest of them, column
    by column: no event tuples, so its cost barely grows with the history's length."""
    times = (*history.times, event[0])
    cut = kept_from(view, times, lateness_us)
    complete_from = history.complete_from
    if times[0] < cut or complete_from is not None:
        complete_from = cut if complete_from is None else max(complete_from, cut)
    start = bisect_left(times, cut)
    ids = (*history.ids, event[1])[start:]
    first_text = 2 + len(view.value_columns)
    return History(ids=ids, times=times[start:],
                   values={c: (*history.values[c], event[2 + i])[start:] for i, c in enumerate(view.value_columns)},
                   labels=(*history.labels, event[-1])[start:] if view.uses_labels else (),
                   texts={c: (*history.texts[c], event[first_text + i])[start:]
                          for i, c in enumerate(view.text_columns)},
                   complete_from=complete_from,
                   answers={i: answers[i] for i in ids if i in answers} if answers else {})


def merge_histories(view: FeatureViewSpec, current: History, incoming: History, *, lateness_us: int = 0) -> History:
    """Union of two histories of one entity (by event id), pruned like an appended one; an event
    in both keeps ``current``'s label unless only ``incoming`` knows it. The union is complete
    from where both are."""
    seen = set(current.ids)
    extra = [e for e in _events(view, incoming) if e[1] not in seen]
    bounds = [b for b in (current.complete_from, incoming.complete_from) if b is not None]
    merged = _pruned(view, [*_events(view, current), *extra], max(bounds, default=None), lateness_us,
                     {**incoming.answers, **current.answers})
    if not view.uses_labels:
        return merged
    known = {i: label for i, label in zip(incoming.ids, incoming.labels, strict=True) if not math.isnan(label)}
    labelled = set_labels(view, merged, {i: known[i] for i, old in zip(merged.ids, merged.labels, strict=True)
                                         if i in known and math.isnan(old)})
    return merged if labelled is None else labelled


def set_labels(view: FeatureViewSpec, history: History, labels: Mapping[str, float]) -> History | None:
    """The history with the delivered labels of the events it holds, or None when that changes
    nothing (a label delivered again, an event no longer kept, a view without label features)."""
    if not view.uses_labels:
        return None
    updated = tuple(float(labels[i]) if i in labels else old for i, old in zip(history.ids, history.labels,
                                                                                strict=True))
    if all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(updated, history.labels, strict=True)):
        return None
    return replace(history, labels=updated)
