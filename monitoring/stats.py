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


def aligned_counts(reference: Mapping[str, int], current: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Counts of both samples over every key seen in either (sorted, as Evidently orders them)."""
    keys = sorted(set(reference) | set(current))
    return (np.array([reference.get(k, 0) for k in keys], dtype="float64"),
            np.array([current.get(k, 0) for k in keys], dtype="float64"))


def chi_squared_p(reference: Mapping[str, int], current: Mapping[str, int]) -> float:
    ref, cur = aligned_counts(reference, current)
    expected = ref * (cur.sum() / ref.sum())
    # A category the reference never saw has expected count 0: the statistic is infinite, p = 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(stats.chisquare(cur, expected)[1])


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
