"""Drift of one model version's window against its reference profile: per-feature scores and levels.

A level needs a shift that is both material and real. Material: PSI (defaults 0.1 WARNING, 0.2
CRITICAL), the absolute change of the share of confident predictions, the ratio of the share of
scores in the reference's top percentile. Real: the feature's test (KS, chi-squared, binomial)
significant at a family-wise 5 % over all of the run's tests (Bonferroni), so a small window's
sampling noise, which inflates PSI, raises no level; on large windows PSI keeps negligible but
significant shifts at INFO.

Each test states its minimum window; below it the feature is INFO with a note saying why:
``min_test_rows`` rows for PSI and its test; for the confident share, enough rows that its
standard error is a third of the warning change; for the top-score share, ten expected rows.
Periodic inputs (hour of day, day of week) are judged over the newest whole periods the window
covers and not at all in a window shorter than their period. The score tests (probability PSI and
KS, confident share, top-score share) likewise over the newest whole days, as the reference's score
is profiled: the model reads the hour, so a window of some hours scores like those hours, not like
the day (measured with a trained model: probability PSI 0.2 and top-score ratios of 2.4 on 1-hour and
6-hour windows of normal traffic). Their minimum window is one day, then the rows above.

A categorical input's chi-squared counts each entity once (``cluster``: the contract's first entity
key, the card): an entity's rows in the window share one unit of weight. Rows of one card are not
independent draws: a fraud burst (one card, six foreign transactions in an hour) moves a 1-hour
window's country mix for real, and counted by rows it was "significant" at p 1e-32 (p 0.09 counted
by card). PSI, the level's size, still counts rows.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from mlops.errors import EmptyWindowError, SmallWindowError
from mlops.reference_profile import (
    SCORE_PERIOD_S,
    NumericProfile,
    ReferenceProfile,
    confident_share,
    event_ticks,
    newest_whole_periods_of_ticks,
)
from monitoring import stats
from monitoring.log_window import LogWindow

Level = Literal["INFO", "WARNING", "CRITICAL"]
LEVELS: tuple[Level, ...] = ("INFO", "WARNING", "CRITICAL")
Ticks = tuple[np.ndarray, np.ndarray, int]  # event times: ticks since the epoch, which rows have one, ticks a second
PROBABILITY = "probability"
CONFIDENT_SHARE = "confident_share"
TOP_SCORE_SHARE = "top_score_share"
# Log columns that are neither model inputs nor unexpected (identifiers, answers, flags).
KNOWN_COLUMNS = frozenset({"event_id", "event_timestamp", "logged_at", "model_name", "model_version", "decision",
                           "unknown_categories", "unknown_entities", "role", "customer_id", "merchant_id",
                           "transaction_id", "request_id", "latency_s", "retry", "features_exact", PROBABILITY})


class DriftThresholds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    psi_warning: float = Field(default=0.1, gt=0)
    psi_critical: float = Field(default=0.2, gt=0)
    confident_warning: float = Field(default=0.05, gt=0)
    confident_critical: float = Field(default=0.10, gt=0)
    p_value: float = Field(default=0.05, gt=0, lt=1)  # family-wise, over every test of the run
    min_rows: int = Field(default=30, ge=1)
    min_test_rows: int = Field(default=50, ge=1)
    top_quantile: float = Field(default=0.98, gt=0.5, lt=1)
    top_warning: float = Field(default=2.0, gt=1)
    top_critical: float = Field(default=3.0, gt=1)

    def level(self, score: float, warning: float, critical: float) -> Level:
        return "CRITICAL" if score >= critical else "WARNING" if score >= warning else "INFO"


class FeatureDrift(BaseModel):
    model_config = ConfigDict(extra="forbid")

    feature: str
    kind: Literal["continuous", "discrete", "categorical", "prediction", "confidence", "top_score"]
    rows: int
    psi: float | None = None
    test: Literal["ks", "chisquare", "binomial", "none"] = "none"
    p_value: float | None = None
    test_drift: bool = False
    score: float | None = None  # what the level is read from: PSI, a share's change or ratio
    unknown_share: float | None = None
    level: Level = "INFO"
    note: str = ""


class DriftReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: str
    model_version: str
    rows: int
    level: Level
    features: list[FeatureDrift]
    ignored_columns: list[str] = []

    def feature(self, name: str) -> FeatureDrift:
        return next(f for f in self.features if f.feature == name)

    def flagged(self) -> list[FeatureDrift]:
        return [f for f in self.features if f.level != "INFO"]


def max_level(levels: list[Level]) -> Level:
    return max(levels, key=LEVELS.index, default="INFO")


def _numeric_drift(name: str, profile: NumericProfile, values: np.ndarray, limits: DriftThresholds,
                   kind: Literal["continuous", "discrete", "prediction"]) -> FeatureDrift:
    if profile.kind == "discrete":
        reference = stats.discrete_reference(profile.values, profile.counts)
        current = stats.value_counts(values)
        psi = stats.psi_from_counts(*stats.aligned_counts(reference, current))
        p_value = stats.pooled_chi_squared_p(reference, current)
        return FeatureDrift(feature=name, kind="discrete" if kind != "prediction" else kind, rows=values.size,
                            psi=psi, test="chisquare", p_value=p_value, score=psi,
                            level=limits.level(psi, limits.psi_warning, limits.psi_critical))
    ordered = np.sort(values)  # one sort serves the bin counts and the KS statistic
    psi = stats.psi_from_counts(np.asarray(profile.bin_counts, dtype="float64"),
                                stats.binned_sorted(profile.edges, ordered).astype("float64"))
    p_value = stats.ks_p_sorted(np.asarray(profile.sample, dtype="float64"), ordered)
    return FeatureDrift(feature=name, kind=kind, rows=values.size, psi=psi, test="ks", p_value=p_value,
                        test_drift=p_value < limits.p_value, score=psi,
                        level=limits.level(psi, limits.psi_warning, limits.psi_critical))


def _categorical_drift(name: str, reference: dict[str, int], codes: np.ndarray, labels: list[str], unknown: float,
                       limits: DriftThresholds, entities: np.ndarray | None = None) -> FeatureDrift:
    """PSI over the rows; the chi-squared over ``entities`` (codes aligned with ``codes``) when given,
    each entity's rows sharing one unit of weight. Rows of code -1 (null) are left out; an entity
    code of -1 leaves its row out of the test only."""
    present = codes >= 0
    values = codes[present]
    counted = np.bincount(values, minlength=len(labels)).tolist()
    current = {label: count for label, count in zip(labels, counted, strict=True) if count}
    psi = stats.psi_from_counts(*stats.aligned_counts(reference, current))
    tested: dict[str, float] = dict(current)
    if entities is not None:
        cards = entities[present]
        known = cards >= 0
        card = np.where(known, cards, 0)
        rows_per_card = np.bincount(card[known], minlength=int(card.max(initial=-1)) + 1)
        share = np.where(known, 1.0 / np.maximum(rows_per_card[card], 1), 0.0)
        weights = np.bincount(values, weights=share, minlength=len(labels)).tolist()
        tested = {label: weight for label, weight in zip(labels, weights, strict=True) if weight > 0}
    p_value = stats.chi_squared_p(reference, tested)
    return FeatureDrift(feature=name, kind="categorical", rows=int(values.size), psi=psi, test="chisquare",
                        p_value=p_value, test_drift=p_value < limits.p_value, score=psi, unknown_share=unknown,
                        level=limits.level(psi, limits.psi_warning, limits.psi_critical))


def _codes(window: pd.DataFrame | LogWindow, name: str) -> tuple[np.ndarray, list[str]]:
    """Each row's value as its text's number in the labels (-1: null); see :meth:`LogWindow.codes`."""
    if isinstance(window, LogWindow):
        return window.codes(name)
    numbers, uniques = pd.factorize(window[name])  # a null's number is -1
    texts: dict[str, int] = {}  # values of one text (1 and "1") share its number
    lookup = np.array([*(texts.setdefault(str(value), len(texts)) for value in uniques), -1], dtype="int64")
    return lookup[numbers], list(texts)


def _flag_counts(flags: pd.Series) -> dict[str, int]:
    """How many rows' answers flagged each field's category as unknown (their lists counted in Arrow)."""
    arrow_backed = isinstance(flags.dtype, pd.ArrowDtype)
    lists = pa.array(flags.array) if arrow_backed else pa.array(flags, from_pandas=True)
    counted = pc.value_counts(pc.list_flatten(lists))
    return {str(v): int(c) for v, c in zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(),
                                           strict=True) if v is not None}


def _absent(name: str, kind: Literal["continuous", "discrete", "categorical"], note: str) -> FeatureDrift:
    # A profiled input the service stopped sending is a schema change: worth an alert, not a fallback.
    return FeatureDrift(feature=name, kind=kind, rows=0, level="WARNING", note=note)


def compute_drift(window: pd.DataFrame | LogWindow, profile: ReferenceProfile, limits: DriftThresholds | None = None,
                  *, model_name: str = "", model_version: str = "", cluster: str | None = None) -> DriftReport:
    """Scores and levels of every profiled input, the predicted probability and the confident share;
    categorical tests count each value of the ``cluster`` column once, when the window has it.

    The window is read a column at a time (``window[name]``), so a :class:`LogWindow` judges a log
    larger than memory."""
    limits = limits or DriftThresholds()
    if window.empty:
        raise EmptyWindowError("the window holds no predictions")
    if len(window) < limits.min_rows:
        raise SmallWindowError(f"the window holds {len(window)} prediction(s); a drift verdict needs at least "
                               f"{limits.min_rows} (--min-rows)")
    features: list[FeatureDrift] = []
    # The event times, read once as integer ticks: the periodic inputs and the score tests judge by them.
    times = event_ticks(window["event_timestamp"]) if "event_timestamp" in window else None
    for name, numeric in profile.numeric.items():
        kind: Literal["continuous", "discrete"] = numeric.kind
        if name not in window:
            features.append(_absent(name, kind, "column absent from the window"))
            continue
        column = pd.to_numeric(window[name], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        present = ~np.isnan(column)
        values = column[present]  # numpy's mask: pandas' dropna took a third of the run
        if values.size == 0:
            features.append(_absent(name, kind, "no values in the window (all null)"))
            continue
        if numeric.period_s is not None:
            features.append(_periodic_drift(name, numeric, times, present, values, limits, kind))
            continue
        features.append(_numeric_drift(name, numeric, values, limits, kind))
    # Share of rows whose answer flagged each field's category as unknown (one pass over the flags).
    flagged = _flag_counts(window["unknown_categories"]) if "unknown_categories" in window else {}
    entities = (_codes(window, cluster)[0] if profile.categorical and cluster is not None and cluster in window
                else None)
    for name, categorical in profile.categorical.items():
        if name not in window:
            features.append(_absent(name, "categorical", "column absent from the window"))
            continue
        codes, labels = _codes(window, name)
        if not np.any(codes >= 0):
            features.append(_absent(name, "categorical", "no values in the window (all null)"))
            continue
        features.append(_categorical_drift(name, categorical.counts, codes, labels,
                                           flagged.get(name, 0) / len(window), limits, entities))
    if not any(f.rows for f in features):
        raise SmallWindowError("no profiled column has values in the window")
    features = _gated(features + _score_drift(window, times, profile, limits), limits)
    ignored = sorted(set(window.columns) - KNOWN_COLUMNS - set(profile.numeric) - set(profile.categorical))
    return DriftReport(model_name=model_name, model_version=model_version, rows=len(window),
                       level=max_level([f.level for f in features]), features=features, ignored_columns=ignored)


def _periodic_drift(name: str, profile: NumericProfile, times: Ticks | None, present: np.ndarray, values: np.ndarray,
                    limits: DriftThresholds, kind: Literal["continuous", "discrete"]) -> FeatureDrift:
    """A periodic input (``values``: the window's rows where ``present``) judged over the newest whole
    periods of the window, or not at all."""
    period_h = f"{(profile.period_s or 0) / 3600:g}h"
    if profile.whole_periods == 0:
        return FeatureDrift(feature=name, kind=kind, rows=0,
                            note=f"not judged: the reference covers less than one {period_h} period")
    if times is None:
        return FeatureDrift(feature=name, kind=kind, rows=0, note="not judged: the window has no event times")
    ticks, known, per_second = times
    if not present.all():
        ticks, known = ticks[present], known[present]
    mask, periods = newest_whole_periods_of_ticks(ticks, known, per_second, float(profile.period_s or 0))
    if periods == 0:
        return FeatureDrift(feature=name, kind=kind, rows=0,
                            note=f"not judged: the window covers less than its {period_h} period")
    return _numeric_drift(name, profile, values[mask], limits, kind)


def _score_drift(window: pd.DataFrame | LogWindow, times: Ticks | None, profile: ReferenceProfile,
                 limits: DriftThresholds) -> list[FeatureDrift]:
    """The score tests over the newest whole days of the window (as the reference is profiled), or not at all."""
    period_s = profile.probability.period_s or SCORE_PERIOD_S
    periods = 0
    if times is not None:
        mask, periods = newest_whole_periods_of_ticks(*times, period_s)
    if periods == 0:
        why = ("the window has no event times" if times is None
               else f"the window covers less than the score's {period_s / 3600:g}h period")
        kinds: dict[str, Literal["prediction", "confidence", "top_score"]] = {
            PROBABILITY: "prediction", CONFIDENT_SHARE: "confidence", TOP_SCORE_SHARE: "top_score"}
        return [FeatureDrift(feature=name, kind=kind, rows=0, note=f"not judged: {why}")
                for name, kind in kinds.items()]
    probabilities = window[PROBABILITY].to_numpy(dtype="float64")[mask]
    return [_numeric_drift(PROBABILITY, profile.probability, probabilities, limits, "prediction"),
            _confident_drift(probabilities, profile, limits),
            _top_score_drift(probabilities, profile.probability, limits)]


def _confident_drift(probabilities: np.ndarray, profile: ReferenceProfile, limits: DriftThresholds) -> FeatureDrift:
    share = profile.confident_share
    # Rows for a standard error of a third of the warning change (at least the tests' minimum).
    needed = max(limits.min_test_rows, int(np.ceil(9 * share * (1 - share) / limits.confident_warning ** 2)))
    observed = confident_share(probabilities, profile.confidence_cutoff)
    change = abs(observed - share)
    p_value = stats.binomial_p(round(observed * probabilities.size), probabilities.size, share)
    drift = FeatureDrift(feature=CONFIDENT_SHARE, kind="confidence", rows=probabilities.size, test="binomial",
                         p_value=p_value, score=change,
                         level=limits.level(change, limits.confident_warning, limits.confident_critical))
    return _under_minimum(drift, needed) if probabilities.size < needed else drift


def _top_score_drift(probabilities: np.ndarray, profile: NumericProfile, limits: DriftThresholds) -> FeatureDrift:
    """How many times more (or fewer) scores than in the reference lie in its top percentile."""
    reference = np.asarray(profile.sample or np.repeat(profile.values, profile.counts), dtype="float64")
    cutoff = float(np.quantile(reference, limits.top_quantile))
    expected = float(np.mean(reference > cutoff)) or 1 - limits.top_quantile
    observed = int(np.sum(probabilities > cutoff))
    ratio = (observed / probabilities.size) / expected
    moved = max(ratio, 1 / ratio) if ratio > 0 else np.inf
    drift = FeatureDrift(feature=TOP_SCORE_SHARE, kind="top_score", rows=probabilities.size, test="binomial",
                         p_value=stats.binomial_p(observed, probabilities.size, expected), score=ratio,
                         level=limits.level(moved, limits.top_warning, limits.top_critical))
    needed = int(np.ceil(10 / expected))
    return _under_minimum(drift, needed) if probabilities.size < needed else drift


def _under_minimum(drift: FeatureDrift, needed: int) -> FeatureDrift:
    return drift.model_copy(update={"level": "INFO", "test_drift": False,
                                    "note": f"not judged: {drift.rows:,} rows, this test needs {needed:,}"})


def _gated(features: list[FeatureDrift], limits: DriftThresholds) -> list[FeatureDrift]:
    """Levels kept only where the test is significant family-wise and the window is big enough."""
    tests = sum(f.p_value is not None for f in features)
    alpha = limits.p_value / max(tests, 1)
    gated = []
    for feature in features:
        if feature.p_value is not None:
            feature = feature.model_copy(update={"test_drift": feature.p_value < alpha})
        if feature.level == "INFO" or feature.rows == 0:
            gated.append(feature)
        elif feature.p_value is not None and feature.rows < limits.min_test_rows:
            gated.append(_under_minimum(feature, limits.min_test_rows))
        elif feature.p_value is not None and not feature.test_drift:
            note = (f"score {feature.score:.3g} not significant: {feature.test} p {feature.p_value:.3g} >= "
                    f"{alpha:.2g} ({limits.p_value:g} over {tests} tests)")
            gated.append(feature.model_copy(update={"level": "INFO", "note": note}))
        else:
            gated.append(feature)
    return gated
