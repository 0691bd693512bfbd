"""The reference profile: what a model's training data looked like, stored with the model so drift
jobs compare live traffic against it without ever re-reading the training set.

Per numeric input: quantile bin edges and bin counts (PSI), plus the values themselves (a seeded
sample of at most ``MAX_SAMPLE``) for the Kolmogorov-Smirnov test; a numeric input with at most
``DISCRETE_MAX_VALUES`` distinct values (counts, flags) keeps per-value counts instead, as Evidently
bins such columns by value. Per categorical input: category counts. And the model's predicted
probabilities (profiled like a numeric input) with the share of confident predictions, and the
version's decision threshold (the estimated quality's reference is computed from both), and, when the
profiled rows carry labels, the score map (mlops.score_map): how often each probability turned out
positive, through which the estimated quality reads served probabilities.

A periodic input (the time features: hour of day, day of week) is profiled over the newest whole
periods the reference spans, and judged only over windows that cover a whole period (see
``newest_whole_periods``): a window of some hours sees only some hours, which is not drift. The
model reads those inputs, so its score moves with the hour too (a trained model's legitimate
traffic scores about 0.8 logit higher in the afternoon than at night): the probability and the
confident share are profiled over the newest whole days (``SCORE_PERIOD_S``) and judged likewise.

The profile is built by the evaluate step from the held-out split of the training run (the newest
rows of the training data, scored out of sample) and logged as the run's ``reference/profile.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict

from mlops.contract import DataContract
from mlops.score_map import ScoreMap, fit_score_map

PROFILE_ARTIFACT = "reference/profile.json"
N_BINS = 10
DISCRETE_MAX_VALUES = 20
MAX_SAMPLE = 20_000
# A prediction this far from the middle counts as confident: p <= 1 - CUTOFF or p >= CUTOFF.
CONFIDENCE_CUTOFF = 0.9
DAY_S = 86_400.0
PERIOD_S = {"hour_of_day_sin": DAY_S, "hour_of_day_cos": DAY_S, "day_of_week_sin": 7 * DAY_S,
            "day_of_week_cos": 7 * DAY_S}
# The score's period: the hour of day moves it most; a week would leave it unjudged for a week.
SCORE_PERIOD_S = DAY_S


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NumericProfile(_Strict):
    kind: Literal["continuous", "discrete"]
    rows: int
    null_count: int
    edges: list[float] = []  # continuous: interior quantile edges; bin i holds edges[i-1] < x <= edges[i]
    bin_counts: list[int] = []
    sample: list[float] = []  # continuous: the reference values (or a seeded sample of them), sorted
    values: list[float] = []  # discrete: the distinct values ...
    counts: list[int] = []  # ... and how often each occurred
    period_s: float | None = None  # periodic inputs: the period, and how many whole ones were profiled
    whole_periods: int = 0


class CategoricalProfile(_Strict):
    rows: int
    null_count: int
    counts: dict[str, int]


class ReferenceProfile(_Strict):
    contract: str
    rows: int
    numeric: dict[str, NumericProfile]
    categorical: dict[str, CategoricalProfile]
    probability: NumericProfile
    confidence_cutoff: float
    confident_share: float
    # The version's decision threshold, for the estimated quality's reference; None in older profiles.
    threshold: float | None = None
    # None when the profiled rows had no labels or too few of a class, and in older profiles.
    score_map: ScoreMap | None = None


def bin_counts(edges: list[float] | np.ndarray, values: np.ndarray) -> np.ndarray:
    """Counts per bin of ``edges`` (len(edges) + 1 bins), the same rule for reference and live data."""
    index = np.searchsorted(np.asarray(edges, dtype="float64"), values, side="left")
    return np.bincount(index, minlength=len(edges) + 1)


def confident_share(probabilities: np.ndarray, cutoff: float = CONFIDENCE_CUTOFF) -> float:
    if probabilities.size == 0:
        return 0.0
    return float(np.mean((probabilities >= cutoff) | (probabilities <= 1 - cutoff)))


def profile_numeric(values: pd.Series | np.ndarray, *, seed: int = 0) -> NumericProfile:
    raw = np.asarray(values, dtype="float64")
    present = raw[~np.isnan(raw)]
    nulls = int(raw.size - present.size)
    distinct, counts = np.unique(present, return_counts=True)
    if distinct.size <= DISCRETE_MAX_VALUES:
        return NumericProfile(kind="discrete", rows=int(raw.size), null_count=nulls,
                              values=distinct.tolist(), counts=counts.astype(int).tolist())
    edges = np.unique(np.quantile(present, np.linspace(0, 1, N_BINS + 1)[1:-1]))
    sample = present
    if present.size > MAX_SAMPLE:
        sample = np.random.default_rng(seed).choice(present, size=MAX_SAMPLE, replace=False)
    return NumericProfile(kind="continuous", rows=int(raw.size), null_count=nulls, edges=edges.tolist(),
                          bin_counts=bin_counts(edges, present).astype(int).tolist(),
                          sample=np.sort(sample).tolist())


def newest_whole_periods(timestamps: pd.Series, period_s: float) -> tuple[np.ndarray, int]:
    """Which rows lie in the newest whole periods the timestamps span, and how many periods that is
    (a missing time lies in none)."""
    return newest_whole_periods_of_ticks(*event_ticks(timestamps), period_s)


_TICKS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def event_ticks(timestamps: pd.Series) -> tuple[np.ndarray, np.ndarray, int]:
    """(integer ticks since the epoch, which rows have a time, ticks per second) of the timestamps."""
    moments = pd.to_datetime(timestamps, utc=True)
    ticks = moments.dt.tz_convert(None).to_numpy().view("int64")
    return ticks, moments.notna().to_numpy(), _TICKS_PER_SECOND[moments.dt.unit]


def newest_whole_periods_of_ticks(ticks: np.ndarray, known: np.ndarray, per_second: int,
                                  period_s: float) -> tuple[np.ndarray, int]:
    """:func:`newest_whole_periods` of times given as integer ticks since the epoch (``known``: which
    are times at all), in numpy: ten million rows as pandas timedeltas cost half a gigabyte.

    The span of n events spread over a stretch of time underestimates it by about one gap between
    events, so the stretch is estimated as span * (n + 1) / (n - 1), with 1 % tolerance.
    """
    n = int(np.count_nonzero(known))
    if n < 2:
        return np.zeros(ticks.size, dtype=bool), 0
    newest, oldest = int(ticks[known].max()), int(ticks[known].min())
    span = (newest - oldest) / per_second * (n + 1) / (n - 1)
    periods = int(span / period_s + 0.01)
    age = (newest - ticks) / per_second
    return known & (age < periods * period_s), periods


def profile_periodic(values: pd.Series, timestamps: pd.Series, period_s: float) -> NumericProfile:
    mask, periods = newest_whole_periods(timestamps, period_s)
    profile = profile_numeric(np.asarray(values, dtype="float64")[mask] if periods else values)
    return profile.model_copy(update={"period_s": period_s, "whole_periods": periods})


def profile_categorical(values: pd.Series) -> CategoricalProfile:
    present = values.dropna().astype(str)
    counts = present.value_counts()
    return CategoricalProfile(rows=len(values), null_count=int(len(values) - len(present)),
                              counts={str(k): int(v) for k, v in counts.items()})


def build_profile(frame: pd.DataFrame, contract: DataContract, probabilities: np.ndarray,
                  threshold: float | None = None) -> ReferenceProfile:
    """Profile of ``frame`` (raw inputs and computed features), the model's probabilities on it and its
    threshold, and the score map when ``frame`` has the contract's label column."""
    probabilities = np.asarray(probabilities, dtype="float64")
    label = contract.label_column
    score_map = fit_score_map(probabilities, frame[label].to_numpy()) if label in frame else None
    scored = np.ones(probabilities.size, dtype=bool)
    days = 0
    if contract.timestamp_column in frame:
        mask, days = newest_whole_periods(frame[contract.timestamp_column], SCORE_PERIOD_S)
        scored = mask if days else scored
    return ReferenceProfile(
        contract=contract.name,
        rows=len(frame),
        numeric={name: profile_periodic(frame[name], frame[contract.timestamp_column], PERIOD_S[name])
                 if name in PERIOD_S and contract.timestamp_column in frame else profile_numeric(frame[name])
                 for name in contract.numeric_inputs},
        categorical={name: profile_categorical(frame[name]) for name in contract.model_inputs.categorical},
        probability=profile_numeric(probabilities[scored]).model_copy(
            update={"period_s": SCORE_PERIOD_S, "whole_periods": days}),
        confidence_cutoff=CONFIDENCE_CUTOFF,
        confident_share=confident_share(probabilities[scored]),
        threshold=threshold,
        score_map=score_map,
    )


def save_profile(profile: ReferenceProfile, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile.model_dump_json())
    return path


def load_profile(path: Path) -> ReferenceProfile:
    return ReferenceProfile.model_validate_json(path.read_text())
