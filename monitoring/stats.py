"""Drift statistics against a reference profile, computed the way Evidently 0.7 computes its tests
(legacy/calculations/stattests), so the scores equal Evidently's on the same data:

- PSI: ``sum((ref - cur) * ln(ref / cur))`` over bins, an empty bin's share replaced as Evidently
  does ("feel_zeroes"). Continuous columns use the profile's quantile bins; discrete and
  categorical columns one bin per value seen in either sample, as Evidently does for them.
- Kolmogorov-Smirnov: scipy's two-sample test, two-sided p-value.
- chi-squared: observed counts against the reference counts scaled to the window's size, over
  every value seen in either sample; a value the reference never saw drives the p-value to 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from scipy import stats

from mlops.reference_profile import bin_counts


def _fill_zeroes(shares: np.ndarray) -> np.ndarray:
    """Evidently's replacement for empty bins, which would make the logarithm infinite."""
    filled = shares.astype("float64").copy()
    nonzero = filled[filled != 0]
    if nonzero.size and nonzero.size < filled.size:
        smallest = float(nonzero.min())
        filled[filled == 0] = smallest / 10**6 if smallest <= 0.0001 else 0.0001
    return filled


def psi_from_counts(reference: np.ndarray, current: np.ndarray) -> float:
    ref = _fill_zeroes(reference / reference.sum())
    cur = _fill_zeroes(current / current.sum())
    return float(np.sum((ref - cur) * np.log(ref / cur)))


def psi_binned(edges: list[float], reference_counts: list[int], current: np.ndarray) -> float:
    """PSI of ``current`` on the reference's quantile bins."""
    return psi_from_counts(np.asarray(reference_counts, dtype="float64"),
                           bin_counts(edges, current).astype("float64"))


def aligned_counts(reference: Mapping[str, float], current: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Counts of both samples over every key seen in either (sorted, as Evidently orders them)."""
    keys = sorted(set(reference) | set(current))
    return (np.array([reference.get(k, 0) for k in keys], dtype="float64"),
            np.array([current.get(k, 0) for k in keys], dtype="float64"))


def chi_squared_p(reference: Mapping[str, float], current: Mapping[str, float]) -> float:
    ref, cur = aligned_counts(reference, current)
    expected = ref * (cur.sum() / ref.sum())
    # A category the reference never saw has expected count 0: the statistic is infinite, p = 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(stats.chisquare(cur, expected)[1])


def pooled_chi_squared_p(reference: Mapping[str, int], current: Mapping[str, int], min_expected: float = 5.0) -> float:
    """chi-squared of a discrete numeric input over neighbouring values pooled until each pool expects
    ``min_expected`` rows: a count one above any the reference saw is not a new category, and cells
    expecting a fraction of a row make the test call noise significant."""
    keys = sorted(set(reference) | set(current), key=float)
    scale = sum(current.values()) / sum(reference.values())
    pools: list[tuple[int, int]] = []
    ref = cur = 0
    for key in keys:
        ref, cur = ref + reference.get(key, 0), cur + current.get(key, 0)
        if ref * scale >= min_expected:
            pools.append((ref, cur))
            ref = cur = 0
    if pools and (ref or cur):
        pools[-1] = (pools[-1][0] + ref, pools[-1][1] + cur)
    if len(pools) < 2:
        return 1.0
    observed = np.array([c for _, c in pools], dtype="float64")
    expected = np.array([r for r, _ in pools], dtype="float64") * scale
    return float(stats.chisquare(observed, expected)[1])


def binomial_p(successes: int, trials: int, share: float) -> float:
    """Two-sided exact binomial test of ``successes`` in ``trials`` against ``share``."""
    if trials == 0 or not 0 < share < 1:
        return 1.0
    return float(stats.binomtest(int(successes), int(trials), share).pvalue)


def ks_p(reference_sample: np.ndarray, current: np.ndarray) -> float:
    return float(stats.ks_2samp(reference_sample, current)[1])


def value_counts(values: np.ndarray) -> dict[str, int]:
    """Counts keyed by the value's text (numbers by repr, so discrete numeric values key exactly)."""
    distinct, counts = np.unique(values, return_counts=True)
    return {_key(v): int(c) for v, c in zip(distinct.tolist(), counts.tolist(), strict=True)}


def _key(value: object) -> str:
    return repr(float(value)) if isinstance(value, int | float) else str(value)


def discrete_reference(values: list[float], counts: list[int]) -> dict[str, int]:
    return {_key(v): c for v, c in zip(values, counts, strict=True)}
