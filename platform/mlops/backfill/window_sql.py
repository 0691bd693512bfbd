"""The contract's features as SQL window expressions over epoch-microsecond times.

The same definition as :mod:`mlops.features`, written for a columnar engine: at event time t a
window feature aggregates the entity's events in [t - window, t). On integer microseconds that is
the frame ``RANGE BETWEEN window PRECEDING AND 1 PRECEDING``, which leaves out the current row and
every other row of the same instant, so ties need no special case. ``seconds_since_previous`` is
the newest earlier instant (``UNBOUNDED PRECEDING AND 1 PRECEDING``), capped at its window; an
empty window gives 0 and the cap, as for an entity nobody has seen. Sums use DuckDB's ``fsum``
(compensated), so they match the exactly rounded ``math.fsum`` of the online path to ~1e-15.

A label feature (``label_count``, ``label_rate``) aggregates the contract's 0/1 label over the events
in [t - delay - window, t - delay): the frame ``RANGE BETWEEN delay + window PRECEDING AND delay + 1
PRECEDING``. Offline every label is known; a NULL label is skipped, as online skips one not yet delivered.

``ratio_to_mean`` and ``zscore`` compare the row's own value of the column (a query row carries it,
as a request does) with the same window: the mean is ``fsum / count`` as for ``mean``, the variance
DuckDB's ``var_pop`` (a stable streaming update, within a few ulps of the exact one like the online
two-pass); all-equal values (``min = max``) give a z-score of 0.

``distinct_count`` is ``count(DISTINCT text)`` over the window, the column as canonical text
(:func:`text_sql`: an int's digits, as :func:`mlops.features.canonical_text`). The pair features are
window functions over the pair: partitioned by the entity and the column's text,
``UNBOUNDED PRECEDING AND 1 PRECEDING`` gives the pair's newest earlier instant, seen within the
window or not and its gap capped at the window; a row whose value is missing never met a pair.
"""

from __future__ import annotations

from mlops.contract import DataContract, FeatureSpec, FeatureViewSpec

TIME_COLUMN = "__t_us"  # the row's event time as microseconds since the epoch (BIGINT)
EVENT_FLAG = "__is_event"  # rows that are events (others are only asked about); see feature_selects
_MICROS = 1_000_000
_DAY_US = 86_400 * _MICROS


def quoted(name: str) -> str:
    """A SQL identifier for a column name from the contract."""
    return '"' + name.replace('"', '""') + '"'


def _window_us(feature: FeatureSpec) -> int:
    return int(feature.window_delta.total_seconds() * _MICROS)


def _frame(key: str, preceding: str, following: str = "1 PRECEDING", *, also: str = "") -> str:
    """A frame over the entity's rows (``also``: a further partitioning expression)."""
    partition = quoted(key) + (f", {also}" if also else "")
    return f"OVER (PARTITION BY {partition} ORDER BY {TIME_COLUMN} RANGE BETWEEN {preceding} AND {following})"


def text_sql(contract: DataContract, column: str) -> str:
    """A key-like column as canonical text (VARCHAR): an int's decimal digits, anything else as it is."""
    if contract.column(column).dtype == "int":
        return f"CAST(CAST({quoted(column)} AS BIGINT) AS VARCHAR)"
    return f"CAST({quoted(column)} AS VARCHAR)"


def _text_feature_sql(feature: FeatureSpec, key: str, text: str, events_only: bool) -> str:
    """``distinct_count``, ``pair_seen`` or ``pair_seconds_since_previous`` of the canonical ``text``."""
    if feature.agg == "distinct_count":
        return f"CAST(count(DISTINCT {_value(text, events_only)}) {_frame(key, f'{_window_us(feature)} PRECEDING')} " \
               "AS DOUBLE)"
    cap = _window_us(feature) / _MICROS
    previous = f"max({_value(TIME_COLUMN, events_only)}) {_frame(key, 'UNBOUNDED PRECEDING', also=text)}"
    gap = f"least(CAST({TIME_COLUMN} - {previous} AS DOUBLE) / {_MICROS}, {cap!r})"
    if feature.agg == "pair_seen":  # the pair's newest earlier event lies in [t - window, t)
        return (f"CAST(CASE WHEN {text} IS NOT NULL AND {previous} >= {TIME_COLUMN} - {_window_us(feature)} "
                "THEN 1 ELSE 0 END AS DOUBLE)")
    return f"CASE WHEN {text} IS NULL THEN CAST({cap!r} AS DOUBLE) ELSE coalesce({gap}, CAST({cap!r} AS DOUBLE)) END"


def _value(expression: str, events_only: bool) -> str:
    """``expression`` for event rows and NULL for query-only rows (aggregates skip NULLs)."""
    return f"CASE WHEN {EVENT_FLAG} THEN {expression} END" if events_only else expression


def _label_feature_sql(feature: FeatureSpec, key: str, label: str, events_only: bool) -> str:
    delay_us = int(feature.delay_delta.total_seconds() * _MICROS)
    frame = _frame(key, f"{delay_us + _window_us(feature)} PRECEDING", f"{delay_us + 1} PRECEDING")
    value = _value(f"CAST({quoted(label)} AS DOUBLE)", events_only)
    positives = f"coalesce(sum({value}) {frame}, 0.0)"
    if feature.agg == "label_count":
        return positives
    known = f"count({value}) {frame}"
    return f"CASE WHEN {known} = 0 THEN 0.0 ELSE {positives} / {known} END"


def _current_value_sql(feature: FeatureSpec, own: str, value: str, frame: str) -> str:
    """``ratio_to_mean`` / ``zscore`` of the row's own value ``own`` against the frame's ``value``s."""
    count = f"count({value}) {frame}"
    mean = f"(fsum({value}) {frame} / {count})"
    if feature.agg == "ratio_to_mean":
        return f"CASE WHEN {count} = 0 OR {mean} = 0 THEN 1.0 ELSE {own} / {mean} END"
    return (f"CASE WHEN {count} < 2 OR min({value}) {frame} = max({value}) {frame} THEN 0.0 "
            f"ELSE ({own} - {mean}) / sqrt(var_pop({value}) {frame}) END")


def window_feature_sql(feature: FeatureSpec, key: str, *, events_only: bool = False,
                       label: str | None = None, text: str | None = None) -> str:
    """One window feature of one row, as a DOUBLE expression (``label``: the contract's label column;
    ``text``: the feature's column as canonical text, see :func:`text_sql`)."""
    if feature.uses_text:
        if text is None:
            raise ValueError(f"feature {feature.name!r} reads its column as text: give its text expression")
        return _text_feature_sql(feature, key, text, events_only)
    if feature.is_label:
        if label is None:
            raise ValueError(f"feature {feature.name!r} aggregates the label: name the label column")
        return _label_feature_sql(feature, key, label, events_only)
    if feature.agg == "seconds_since_previous":
        cap = _window_us(feature) / _MICROS
        previous = f"max({_value(TIME_COLUMN, events_only)}) {_frame(key, 'UNBOUNDED PRECEDING')}"
        return (f"coalesce(least(CAST({TIME_COLUMN} - {previous} AS DOUBLE) / {_MICROS}, {cap!r}), "
                f"CAST({cap!r} AS DOUBLE))")
    frame = _frame(key, f"{_window_us(feature)} PRECEDING")
    count = f"count({_value('1', events_only)}) {frame}"
    if feature.agg == "count":
        return f"CAST({count} AS DOUBLE)"
    if feature.column is None:  # the contract forbids this; narrows the type
        raise ValueError(f"feature {feature.name!r} has no column")
    own = f"CAST({quoted(feature.column)} AS DOUBLE)"
    value = _value(own, events_only)
    if feature.uses_current_value:
        return _current_value_sql(feature, own, value, frame)
    if feature.agg == "max":
        return f"coalesce(max({value}) {frame}, 0.0)"
    total = f"coalesce(fsum({value}) {frame}, 0.0)"
    return total if feature.agg == "sum" else f"CASE WHEN {count} = 0 THEN 0.0 ELSE {total} / {count} END"


def time_feature_sql(name: str) -> str:
    """A cyclic encoding of the row's UTC time, computed as :func:`mlops.features.time_feature_values` does."""
    of_day = f"(({TIME_COLUMN} % {_DAY_US}) + {_DAY_US}) % {_DAY_US}"
    seconds = f"(({of_day}) // {_MICROS} + CAST(({of_day}) % {_MICROS} AS DOUBLE) / {_MICROS})"
    weekday = f"((({TIME_COLUMN} - ({of_day})) // {_DAY_US} + 3) % 7 + 7) % 7"  # 1970-01-01 was a Thursday
    hour_angle = f"(2 * pi() * {seconds} / 86400.0)"
    week_angle = f"(2 * pi() * ({weekday} + {seconds} / 86400.0) / 7)"
    return {
        "hour_of_day_sin": f"sin({hour_angle})", "hour_of_day_cos": f"cos({hour_angle})",
        "day_of_week_sin": f"sin({week_angle})", "day_of_week_cos": f"cos({week_angle})",
    }[name]


def view_key(contract: DataContract, view: FeatureViewSpec) -> str:
    return contract.entity(view.entity).join_key


def feature_selects(contract: DataContract, *, events_only: bool = False) -> list[str]:
    """``expression AS name`` for every contract feature, in ``contract.feature_names`` order.

    With ``events_only`` the rows with a false ``__is_event`` are asked about but never aggregated
    (features at arbitrary moments against a table of events).
    """
    label = contract.label_column
    selects = []
    for view in contract.feature_views:
        for feature in view.features:
            text = text_sql(contract, str(feature.column)) if feature.uses_text else None
            expression = window_feature_sql(feature, view_key(contract, view), events_only=events_only, label=label,
                                            text=text)
            selects.append(f"{expression} AS {quoted(feature.name)}")
    selects += [f"{time_feature_sql(name)} AS {quoted(name)}" for name in contract.time_features]
    return selects
