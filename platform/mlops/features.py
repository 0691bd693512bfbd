"""Window features with exact semantics, computed from per-entity event histories (pure Python).

An entity's *history* is the list of its recent events: id, time and the values of the columns its
feature view aggregates. At event time t a window feature aggregates the entity's events in
[t - window, t): the current transaction, and any other of the same instant, are excluded, so the
order in which same-instant events arrive never matters. Time features encode t itself.

:func:`compute_features` is the one definition. Serving calls it on the history the online store
holds (:mod:`mlops.histories`), which every scored transaction extends, at the transaction's own
time whatever arrived before it; the offline backfill (:mod:`mlops.backfill`) is the same
definition in SQL, held equal to this one by a property test.

Label features look back past a delay: at t they aggregate the 0/1 labels of the events in
[t - delay - window, t - delay). A view with one keeps each event's label in its history, NaN
until ``mlops labels ingest`` delivers it (:func:`mlops.histories.set_labels`); only delivered labels count, where
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
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mlops.contract import DataContract, FeatureSpec
from mlops.histories import History, empty_history

if TYPE_CHECKING:
    import pandas as pd

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


def canonical_text(value: Any, dtype: str) -> str | None:
    """A key-like value as the history keeps it: an int column's value as its decimal digits
    (``7``, ``7.0`` and ``"7"`` alike), anything else as its text; None (or NaN) stays None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if dtype == "int":
        return str(int(value))
    return str(value)


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
