"""The oracle the feature tests compare with: random transaction streams (hypothesis strategies) and
each row's features recomputed by brute force from its raw rows, in exact arithmetic where it matters."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd
from hypothesis import strategies as st

from mlops.backfill.engines import DuckDBEngine
from mlops.contract import DataContract, FeatureSpec
from mlops.features import (
    compute_features,
)
from mlops.online_features import OnlineEvent, OnlineFeatures
from mlops.settings import Settings

BASE = datetime(2026, 3, 2, 22, 0, tzinfo=UTC)
DUCKDB = DuckDBEngine(Settings())
# What the engine's materialized histories keep beyond the horizon, as the service's write-through does.
LATENESS_US = int(DUCKDB.settings.late_event_allowance.total_seconds() * 1_000_000)
TS = "event_timestamp"
AMOUNT = {"amount": 12.5}  # the event's own value, for features that compare it with the window
# Half-hour steps hit the 1 h and 24 h window edges exactly; few steps make same-instant ties.
OFFSETS = st.integers(min_value=0, max_value=24 * 12).map(lambda n: timedelta(minutes=30 * n))
_EVENT = st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]), OFFSETS,
                   st.integers(min_value=1, max_value=500_000).map(lambda cents: cents / 100))
STREAMS = st.lists(_EVENT, min_size=1, max_size=25)
# Days and the 7-day and 30-day edges, exactly and one microsecond either side, mixed with half hours.
_EDGES = [timedelta(days=d) + timedelta(microseconds=u) for d in (7, 30) for u in (-1, 0, 1)]
WIDE_OFFSETS = st.one_of(OFFSETS, st.integers(min_value=0, max_value=40).map(lambda d: timedelta(days=d)),
                          st.sampled_from(_EDGES))
WIDE_STREAMS = st.lists(st.tuples(st.sampled_from(["c1", "c2", "c3"]), st.sampled_from(["m1", "m2"]), WIDE_OFFSETS,
                                  st.integers(min_value=1, max_value=500_000).map(lambda cents: cents / 100)),
                        min_size=1, max_size=30)


def stream_frame(events: list[tuple[str, str, timedelta, float]], prefix: str = "") -> pd.DataFrame:
    rows = [{"transaction_id": f"{prefix}T{i:03d}", "customer_id": prefix + c, "merchant_id": prefix + m,
             TS: BASE + offset, "amount": amount} for i, (c, m, offset, amount) in enumerate(events)]
    return pd.DataFrame(rows)


_NS = "_ns"  # a row's time in integer nanoseconds since the epoch (UTC), beside its Timestamp


def _ns(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1) * 1000


def _rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``frame``'s rows as dicts, each with its time in integer nanoseconds: the windows below compare
    integers, exactly, instead of filtering a frame per row and feature."""
    rows = [{str(name): value for name, value in row.items()} for row in frame.to_dict("records")]
    for row in rows:
        row[_NS] = pd.Timestamp(row[TS]).value
    return rows


def brute_force(frame: pd.DataFrame, contract: DataContract, only: pd.Index | None = None) -> pd.DataFrame:
    """Each row's features (or those of the rows ``only`` names) straight from the definition, one
    raw row at a time, against every row of ``frame``."""
    out = []
    rows = _rows(frame)
    asked = frame if only is None else frame.loc[only]
    for row in _rows(asked):
        t, t_ns = row[TS], row[_NS]
        values: dict[str, float] = {}
        for view in contract.feature_views:
            key = contract.entity(view.entity).join_key
            mine = [other for other in rows if other[key] == row[key]]
            for feature in view.features:
                window = _ns(feature.window_delta)
                if feature.is_label:  # [t - delay - window, t - delay), delivered labels only
                    seen_by = t_ns - _ns(feature.delay_delta)
                    labels = [o[contract.label_column] for o in mine if seen_by - window <= o[_NS] < seen_by]
                    known = [float(label) for label in labels if not pd.isna(label)]
                    values[feature.name] = (math.fsum(known) if feature.agg == "label_count"
                                            else math.fsum(known) / len(known) if known else 0.0)
                    continue
                if feature.uses_text:  # values compared as text (an int as its digits), missing ones never
                    assert feature.column is not None
                    values[feature.name] = text_feature(feature, mine, row, contract)
                    continue
                if feature.agg == "seconds_since_previous":
                    before = [o[_NS] for o in mine if o[_NS] < t_ns]
                    gap = (t_ns - max(before)) / 1e9 if before else math.inf
                    values[feature.name] = min(gap, window / 1e9)
                    continue
                inside = [o for o in mine if t_ns - window <= o[_NS] < t_ns]
                if feature.agg == "count":
                    values[feature.name] = float(len(inside))
                    continue
                assert feature.column is not None
                amounts = [float(o[feature.column]) for o in inside]
                if feature.uses_current_value:
                    values[feature.name] = exact_score(feature.agg, float(row[feature.column]), amounts)
                    continue
                values[feature.name] = {
                    "sum": math.fsum(amounts), "max": max(amounts, default=0.0),
                    "mean": math.fsum(amounts) / len(amounts) if amounts else 0.0,
                }[feature.agg]
        hour = t.hour + t.minute / 60 + (t.second + t.microsecond / 1e6) / 3600
        day = t.dayofweek + hour / 24
        values |= {"hour_of_day_sin": math.sin(2 * math.pi * hour / 24),
                   "hour_of_day_cos": math.cos(2 * math.pi * hour / 24),
                   "day_of_week_sin": math.sin(2 * math.pi * day / 7),
                   "day_of_week_cos": math.cos(2 * math.pi * day / 7)}
        out.append({name: values[name] for name in contract.feature_names})
    return pd.DataFrame(out, index=asked.index)


def _as_text(value: object, dtype: str) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(int(value)) if dtype == "int" else str(value)  # type: ignore[call-overload]


def text_feature(feature: FeatureSpec, mine: Sequence[Mapping[str, Any]], row: Mapping[str, Any],
                 contract: DataContract) -> float:
    """distinct_count / pair_seen / pair_seconds_since_previous from the entity's raw rows (as
    :func:`brute_force` holds them: dicts with their time in nanoseconds)."""
    t_ns, window, column = row[_NS], _ns(feature.window_delta), str(feature.column)
    dtype = contract.column(column).dtype
    inside = [o for o in mine if t_ns - window <= o[_NS] < t_ns]
    texts = [_as_text(o[column], dtype) for o in inside]
    if feature.agg == "distinct_count":
        return float(len({x for x in texts if x is not None}))
    own = _as_text(row[column], dtype)
    met = [o[_NS] for o, text in zip(inside, texts, strict=True) if own is not None and text == own]
    if feature.agg == "pair_seen":
        return 1.0 if met else 0.0
    return min((t_ns - max(met)) / 1e9, window / 1e9) if met else window / 1e9


def text_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``frame``'s rows as :func:`text_feature` reads them."""
    return _rows(frame)


def exact_score(agg: str, value: float, window: list[float]) -> float:
    """``ratio_to_mean`` / ``zscore`` of ``value`` against ``window`` in exact rational arithmetic."""
    n = len(window)
    exact = [Fraction(x) for x in window]
    mean = sum(exact, Fraction(0)) / n if n else Fraction(0)
    if agg == "ratio_to_mean":
        return 1.0 if mean == 0 else float(Fraction(value) / mean)
    if n < 2 or min(window) == max(window):
        return 0.0
    variance = sum(((x - mean) ** 2 for x in exact), Fraction(0)) / n
    return float(Fraction(value) - mean) / math.sqrt(float(variance))


def assert_scores_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """As :func:`assert_features_equal`, but a ratio or z-score (unbounded: 89,920 standard deviations
    from a window of nearly equal values is a valid z-score) to 1e-9 of its size when above 1."""
    scores = [c for c in expected.columns if "ratio" in c or "zscore" in c]
    assert_features_equal(got.drop(columns=scores), expected.drop(columns=scores))
    error = (got[scores].astype("float64") - expected[scores].astype("float64")).abs() / expected[scores].abs().clip(
        lower=1.0)
    assert float(error.max().max()) <= 1e-9, got[scores].compare(expected[scores])


def assert_features_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    diff = (got.astype("float64") - expected.astype("float64")).abs().to_numpy()
    assert float(diff.max(initial=0.0)) <= 1e-9, got.compare(expected)


def backfilled(frame: pd.DataFrame, contract: DataContract, folder: Path) -> pd.DataFrame:
    """Each row's features from the DuckDB backfill of ``frame``, indexed like ``frame``."""
    source, out = folder / "raw.parquet", folder / "features.parquet"
    frame.to_parquet(source, index=False)
    DUCKDB.backfill(source, out, contract)
    table = pd.read_parquet(out)
    assert sorted(table["transaction_id"]) == sorted(frame["transaction_id"])
    assert (table[contract.feature_names].dtypes == "float64").all()
    by_id = table.set_index("transaction_id").loc[frame["transaction_id"]]
    return by_id[contract.feature_names].set_axis(frame.index)


# One stream that sits on every edge (a deterministic, fast counterpart of the hypothesis tests, for
# `make mutation`): an event exactly at t - 1h and t - 24h (in), one second beyond (out), two events
# of one instant, a 10-day gap past the 7-day history horizon, gaps above and below the 30-day cap.
DAY = timedelta(days=1)


def served_features(online: OnlineFeatures, contract: DataContract, row: pd.Series) -> dict[str, float]:
    keys = {e.join_key: str(row[e.join_key]) for e in contract.entities}
    event = OnlineEvent(keys, row["transaction_id"], row[TS], {"amount": row["amount"]})  # as the predictor gathers it
    [seen] = online.record_events([event])
    return compute_features(contract, seen.histories, row[TS], event.values)


def with_features(contract: DataContract, added: dict[str, list[dict[str, str]]]) -> DataContract:
    """``contract`` with the features of ``added`` (entity -> feature specs) appended to each view."""
    raw = contract.model_dump(mode="json")
    for view in raw["feature_views"]:
        view["features"] += added[view["entity"]]
    return DataContract.model_validate(raw)


# Label features: the bundled contract plus a label count and rate per view, with delays whose edges
# the streams hit (30 min and 1 h steps; the merchant's 7-day delay and 30-day reach are WIDE edges).
LABEL_FEATURES = {
    "customer": [{"name": "customer_fraud_count_1d", "agg": "label_count", "window": "1d", "delay": "1h"},
                 {"name": "customer_fraud_rate_1h", "agg": "label_rate", "window": "1h", "delay": "30m"}],
    "merchant": [{"name": "merchant_fraud_rate_23d", "agg": "label_rate", "window": "23d", "delay": "7d"},
                 {"name": "merchant_fraud_count_23d", "agg": "label_count", "window": "23d", "delay": "7d"}],
}


def with_label_features(contract: DataContract) -> DataContract:
    return with_features(contract, LABEL_FEATURES)


# The current value against the entity's own window: a ratio to the mean and a z-score per view, on
# windows whose edges the streams hit; amounts often repeat (equal values: a z-score of 0).
CURRENT_VALUE_FEATURES = {
    "customer": [{"name": "customer_amount_ratio_24h", "agg": "ratio_to_mean", "column": "amount", "window": "24h"},
                 {"name": "customer_amount_zscore_7d", "agg": "zscore", "column": "amount", "window": "7d"}],
    "merchant": [{"name": "merchant_amount_zscore_1h", "agg": "zscore", "column": "amount", "window": "1h"},
                 {"name": "merchant_amount_ratio_30d", "agg": "ratio_to_mean", "column": "amount", "window": "30d"}],
}


def with_current_value_features(contract: DataContract) -> DataContract:
    return with_features(contract, CURRENT_VALUE_FEATURES)


# Novelty and variety: distinct merchants and channels of a card, whether (and how long ago) the
# card met this merchant, and the same from the merchant's side; windows whose edges the streams hit.
TEXT_FEATURES = {
    "customer": [{"name": "customer_merchants_24h", "agg": "distinct_count", "column": "merchant_id", "window": "24h"},
                 {"name": "customer_channels_1h", "agg": "distinct_count", "column": "channel", "window": "1h"},
                 {"name": "customer_channel_gap_24h", "agg": "pair_seconds_since_previous", "column": "channel",
                  "window": "24h"},
                 {"name": "customer_met_channel_1h", "agg": "pair_seen", "column": "channel", "window": "1h"},
                 {"name": "customer_met_merchant_7d", "agg": "pair_seen", "column": "merchant_id", "window": "7d"},
                 {"name": "customer_merchant_gap_1h", "agg": "pair_seconds_since_previous", "column": "merchant_id",
                  "window": "1h"}],
    "merchant": [{"name": "merchant_customers_1h", "agg": "distinct_count", "column": "customer_id", "window": "1h"},
                 {"name": "merchant_met_customer_30d", "agg": "pair_seen", "column": "customer_id", "window": "30d"},
                 {"name": "merchant_customer_gap_7d", "agg": "pair_seconds_since_previous", "column": "customer_id",
                  "window": "7d"}],
}


def with_text_features(contract: DataContract) -> DataContract:
    return with_features(contract, TEXT_FEATURES)


def log_served(settings: Settings, frame: pd.DataFrame, served: pd.DataFrame, inputs: Sequence[str],
               exact: Sequence[bool] | None = None) -> None:
    """Log ``frame``'s rows as predictions answered with ``served``'s features (``exact``: whether
    the service flagged each one exact; all by default), as the skew check reads them."""
    from mlops.prediction_log import PredictionLog, PredictionRecord, log_dir

    flags = [True] * len(frame) if exact is None else list(exact)
    log = PredictionLog(log_dir(settings), fsync_interval_s=0)
    try:
        log.write([PredictionRecord(
            event_id=row["transaction_id"], event_timestamp=row[TS],
            entities={"customer_id": row["customer_id"], "merchant_id": row["merchant_id"]},
            inputs={name: row[name] for name in inputs}, features=features, unknown_entities=[],
            unknown_categories=[], logged_at=row[TS], probability=0.5, decision="legit", model_name="m",
            model_version="1", features_exact=flag)
            for row, features, flag in zip(frame.to_dict("records"), served.to_dict("records"), flags, strict=True)])
    finally:
        log.close()
