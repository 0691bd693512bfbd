"""Window features with exact semantics, computed from per-entity event histories (pure Python).

An entity's *history* is the list of its recent events: id, time and the values of the columns its
feature view aggregates. At event time t a window feature aggregates the entity's events in
[t - window, t): the current transaction, and any other of the same instant, are excluded, so the
order in which same-instant events arrive never matters. Time features encode t itself.

:func:`compute_features` is the one definition. Serving calls it on the history the online store
holds, which every scored transaction extends (:func:`append_event`); the offline backfill
(:mod:`mlops.backfill`) is the same definition in SQL, held equal to this one by a property test.
A history keeps the events of the longest window before its newest event plus the events of the
instant just before the newest, so "seconds since the previous transaction" stays exact however
long ago that was.

Label features look back past a delay: at t they aggregate the 0/1 labels of the events in
[t - delay - window, t - delay). A view with one keeps each event's label in its history, NaN
until ``mlops labels ingest`` delivers it (:func:`set_labels`); only delivered labels count, where
the offline backfill knows every label.

``ratio_to_mean`` and ``zscore`` compare the current event's own value (which the request carries)
with the entity's window [t - window, t): :func:`compute_features` takes it as ``current``. The
window's mean is its exactly rounded sum over its count; the z-score's variance is the corrected
two-pass one (squared deviations from that mean), within a few ulps of the exact variance, as the
engines' stable ``var_pop`` is. All-equal values (min = max: an exact test) give a z-score of 0.

``distinct_count``, ``pair_seen`` and ``pair_seconds_since_previous`` read a key-like column (an
entity key, a category, an int): the history keeps each event's value as canonical text
(:func:`canonical_text`: an int's decimal digits, a string as it is; None when missing), and the
current event's value comes with ``current`` as for the ratio.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from mlops.contract import DataContract, FeatureSpec, FeatureViewSpec

if TYPE_CHECKING:
    import pandas as pd

# A history is stored online as one compact JSON string (Redis and SQLite hold strings).
EVENTS_FIELD = "events"
# The time of the history's newest event (microseconds), stored beside it.
NEWEST_FIELD = "newest_event_us"
_IDS, _TIMES, _VALUES, _LABELS = "ids", "times", "values", "labels"  # times: microseconds since the Unix epoch, UTC
_TEXTS = "texts"
_MICROS = 1_000_000
_DAY_SECONDS = 86_400.0
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _utc(moment: datetime | pd.Timestamp) -> datetime | pd.Timestamp:
    """``moment`` in UTC; a naive one is read as UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def to_micros(moment: datetime | pd.Timestamp) -> int:
    """Microseconds since the epoch of an aware timestamp (naive ones are read as UTC). A pandas
    Timestamp's nanoseconds are floored, as pandas does: its difference is a Timedelta whose days,
    seconds and microseconds are a timedelta's and whose nanoseconds are left out."""
    delta = _utc(moment) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * _MICROS + delta.microseconds


@dataclass(frozen=True)
class History:
    """One entity's kept events, ascending by (time, id).

    ``labels`` holds each event's 0/1 label (NaN: not delivered yet) when the view has label
    features, and is empty otherwise; ``texts`` each event's value of the view's text columns
    (canonical text, None when missing).
    """

    ids: tuple[str, ...] = ()
    times: tuple[int, ...] = ()
    values: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    labels: tuple[float, ...] = ()
    texts: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict)

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
        return orjson.dumps(stored).decode()


def stored_fields(view: FeatureViewSpec, history: History) -> dict[str, Any]:
    """The fields a non-empty history is stored as (an online value)."""
    return {EVENTS_FIELD: history.encode(view), NEWEST_FIELD: history.times[-1]}


def empty_history(view: FeatureViewSpec) -> History:
    return History(values={c: () for c in view.value_columns}, texts={c: () for c in view.text_columns})


def canonical_text(value: Any, dtype: str) -> str | None:
    """A key-like value as the history keeps it: an int column's value as its decimal digits
    (``7``, ``7.0`` and ``"7"`` alike), anything else as its text; None (or NaN) stays None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if dtype == "int":
        return str(int(value))
    return str(value)


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
    keys = list(zip(times, ids, strict=True))
    if not all(map(operator.lt, keys, keys[1:])):  # written in order; anything else is put in order here
        order = sorted(range(len(keys)), key=keys.__getitem__)
        times, ids = [times[i] for i in order], [ids[i] for i in order]
        values, labels = [[v[i] for i in order] for v in values], [[v[i] for i in order] for v in labels]
        texts = [[v[i] for i in order] for v in texts]
    return History(ids=tuple(ids), times=tuple(times),
                   values={c: tuple(v) for c, v in zip(view.value_columns, values, strict=True)},
                   labels=tuple(labels[0]) if labels else (),
                   texts={c: tuple(v) for c, v in zip(view.text_columns, texts, strict=True)})


def _label_value(feature: FeatureSpec, history: History, t_us: int) -> float:
    """Positives (``label_count``) or their share (``label_rate``) among the delivered labels of the
    events in [t - delay - window, t - delay)."""
    delay_us = int(feature.delay_delta.total_seconds() * _MICROS)
    window_us = int(feature.window_delta.total_seconds() * _MICROS)
    end = bisect_left(history.times, t_us - delay_us)
    start = bisect_left(history.times, t_us - delay_us - window_us)
    known = [label for label in history.labels[start:end] if not math.isnan(label)]
    positives = math.fsum(known)
    if feature.agg == "label_count":
        return positives
    return positives / len(known) if known else 0.0


def current_value_score(agg: str, value: float, selected: Sequence[float]) -> float:
    """``ratio_to_mean`` or ``zscore`` of ``value`` against the window's values ``selected``."""
    n = len(selected)
    mean = math.fsum(selected) / n if n else 0.0
    if agg == "ratio_to_mean":
        return 1.0 if n == 0 or mean == 0 else value / mean
    if n < 2 or min(selected) == max(selected):
        return 0.0
    deviations = [x - mean for x in selected]
    squares = math.fsum(d * d for d in deviations) - math.fsum(deviations) ** 2 / n
    return (value - mean) / math.sqrt(squares / n)


def _text_value(feature: FeatureSpec, history: History, start: int, end: int, t_us: int,
                current: str | None) -> float:
    """``distinct_count``, ``pair_seen`` or ``pair_seconds_since_previous`` over the events [start, end)."""
    texts = history.texts[str(feature.column)]
    if feature.agg == "distinct_count":
        return float(len({x for x in texts[start:end] if x is not None}))
    window_us = int(feature.window_delta.total_seconds() * _MICROS)
    latest = next((i for i in range(end - 1, start - 1, -1) if current is not None and texts[i] == current), None)
    if feature.agg == "pair_seen":
        return 0.0 if latest is None else 1.0
    cap = window_us / _MICROS
    return cap if latest is None else min((t_us - history.times[latest]) / _MICROS, cap)


def _window_value(feature: FeatureSpec, history: History, t_us: int,
                  current: Mapping[str, Any] | None = None, dtypes: Mapping[str, str] | None = None) -> float:
    if feature.is_label:
        return _label_value(feature, history, t_us)
    window_us = int(feature.window_delta.total_seconds() * _MICROS)
    end = bisect_left(history.times, t_us)  # events at or after t are excluded
    if feature.agg == "seconds_since_previous":
        cap = window_us / _MICROS
        return cap if end == 0 else min((t_us - history.times[end - 1]) / _MICROS, cap)
    start = bisect_left(history.times, t_us - window_us)
    if feature.agg == "count":
        return float(end - start)
    if feature.column is None:  # the contract forbids this; narrows the type
        raise ValueError(f"feature {feature.name!r} has no column")
    if feature.agg == "distinct_count":
        return _text_value(feature, history, start, end, t_us, None)
    if feature.uses_text or feature.uses_current_value:  # these compare the event's own value
        if current is None or feature.column not in current:
            raise ValueError(f"feature {feature.name!r} compares the current value of {feature.column!r}: "
                             "pass the event's own values as current")
        if feature.uses_text:
            own = canonical_text(current[feature.column], (dtypes or {}).get(feature.column, "string"))
            return _text_value(feature, history, start, end, t_us, own)
        return current_value_score(feature.agg, float(current[feature.column]),
                                   history.values[feature.column][start:end])
    selected = history.values[feature.column][start:end]
    if not selected:
        return 0.0
    if feature.agg == "max":
        return float(max(selected))
    total = math.fsum(selected)  # exactly rounded: the result never depends on event order
    return total if feature.agg == "sum" else total / len(selected)


def time_feature_values(names: Sequence[str], moment: datetime | pd.Timestamp) -> dict[str, float]:
    """Cyclic encodings of the UTC hour of day and day of week of ``moment``."""
    stamp = _utc(moment)
    seconds = stamp.hour * 3600 + stamp.minute * 60 + stamp.second + stamp.microsecond / _MICROS
    hour_angle = 2 * math.pi * seconds / _DAY_SECONDS
    week_angle = 2 * math.pi * (stamp.weekday() + seconds / _DAY_SECONDS) / 7
    encodings = {
        "hour_of_day_sin": math.sin(hour_angle), "hour_of_day_cos": math.cos(hour_angle),
        "day_of_week_sin": math.sin(week_angle), "day_of_week_cos": math.cos(week_angle),
    }
    return {name: encodings[name] for name in names}


def compute_features(contract: DataContract, histories: Mapping[str, History],
                     moment: datetime | pd.Timestamp, current: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Every computed model input at ``moment``, in ``contract.feature_names`` order.

    ``histories`` maps each feature view's name to its entity's history (missing = no events);
    ``current``: the event's own values of the columns its ``ratio_to_mean``, ``zscore`` and pair
    features compare (needed only by those; key-like ones in any form :func:`canonical_text` reads).
    """
    t_us = to_micros(moment)
    result: dict[str, float] = {}
    for view in contract.feature_views:
        history = histories.get(view.view_name) or empty_history(view)
        dtypes = {c: contract.column(c).dtype for c in view.text_columns}
        for feature in view.features:
            result[feature.name] = _window_value(feature, history, t_us, current, dtypes)
    result.update(time_feature_values(contract.time_features, moment))
    return result


def unknown_entities(contract: DataContract, histories: Mapping[str, History],
                     moment: datetime | pd.Timestamp) -> list[str]:
    """Entities with no transaction before ``moment`` (scored with the empty-window defaults)."""
    t_us = to_micros(moment)
    return [view.entity for view in contract.feature_views
            if not (histories.get(view.view_name) or empty_history(view)).known_before(t_us)]


def _pruned(view: FeatureViewSpec, events: list[tuple[Any, ...]], *, in_order: bool = False) -> History:
    """Keep the events of the horizon before the newest one, plus those of the instant before it."""
    if not in_order:
        events.sort()
    if events:
        times = [e[0] for e in events]
        newest = times[-1]
        before_newest = bisect_left(times, newest)
        previous = times[before_newest - 1] if before_newest else newest
        oldest = newest - int(view.history_horizon.total_seconds() * _MICROS)
        # In time order, the kept events are a suffix: nothing lies between the previous instant and the newest.
        events = events[bisect_left(times, min(previous, oldest)):]
    width = 2 + len(view.value_columns) + len(view.text_columns) + view.uses_labels
    columns = list(zip(*events, strict=True)) if events else [()] * width
    first_text = 2 + len(view.value_columns)
    return History(ids=tuple(columns[1]), times=tuple(columns[0]),
                   values={c: tuple(columns[2 + i]) for i, c in enumerate(view.value_columns)},
                   labels=tuple(columns[-1]) if view.uses_labels else (),
                   texts={c: tuple(columns[first_text + i]) for i, c in enumerate(view.text_columns)})


def _events(view: FeatureViewSpec, history: History) -> list[tuple[Any, ...]]:
    """(time, id, *values, *texts, label if the view keeps labels) per event; ids are unique, so
    sorting never compares the values."""
    labels = [history.labels] if view.uses_labels else []
    return list(zip(history.times, history.ids, *(history.values[c] for c in view.value_columns),
                    *(history.texts[c] for c in view.text_columns), *labels, strict=True))


def append_event(view: FeatureViewSpec, history: History, event_id: str, t_us: int,
                 values: Mapping[str, float], label: float | None = None,
                 texts: Mapping[str, str | None] | None = None) -> History | None:
    """The history with one more event, or None when the id is already in it (idempotent).

    ``label``: the event's 0/1 label when known (the offline replay); a served event's is not yet.
    ``texts``: the event's canonical text of each of the view's text columns (:func:`canonical_text`).
    """
    if event_id in history.ids:
        return None
    if view.text_columns and texts is None:
        raise ValueError(f"{view.view_name} keeps {view.text_columns}: pass the event's texts")
    event = (t_us, event_id, *(float(values[c]) for c in view.value_columns),
             *(_text((texts or {})[c]) for c in view.text_columns),
             *([_label(label)] if view.uses_labels else []))
    events = _events(view, history)
    if events and event < events[-1]:
        insort(events, event)
    else:  # the usual case: the newest event so far
        events.append(event)
    return _pruned(view, events, in_order=True)


def merge_histories(view: FeatureViewSpec, current: History, incoming: History) -> History:
    """Union of two histories of one entity (by event id), pruned like an appended one; an event
    in both keeps ``current``'s label unless only ``incoming`` knows it."""
    seen = set(current.ids)
    extra = [e for e in _events(view, incoming) if e[1] not in seen]
    merged = _pruned(view, [*_events(view, current), *extra])
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
    return History(ids=history.ids, times=history.times, values=history.values, labels=updated, texts=history.texts)
