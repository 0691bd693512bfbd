"""Drift statistics against a reference profile, computed the way Evidently 0.7 computes its tests
(legacy/calculations/stattests), so the scores equal Evidently's on the same data:

- PSI: ``sum((ref - cur) * ln(ref / cur))`` over bins, an empty bin's share replaced as Evidently
  does ("feel_zeroes"). Continuous columns use the profile's quantile bins; discrete and
  categorical columns one bin per value seen in either sample, as Evidently does for them.
- Kolmogorov-Smirnov: scipy's two-sample test, two-sided p-value. On large samples (scipy's
  asymptotic branch) the statistic is computed here from the sorted samples, equal to scipy's to the
  last bit: scipy evaluates both ECDFs at every point of both samples (two searches of n + m
  points); between two reference points the reference's ECDF is flat, so only the window's counts
  at the reference points decide (three searches of m points into the sorted window, which the
  PSI's bin counts then read too).
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


# scipy's ks_2samp computes the exact distribution up to this many rows a side, the asymptotic beyond.
KS_EXACT_MAX = 10_000


def ks_p_sorted(reference: np.ndarray, current: np.ndarray) -> float:
    """scipy's two-sided ks_2samp p-value of two sorted samples, without re-sorting or merging them."""
    n1, n2 = reference.size, current.size
    if max(n1, n2) <= KS_EXACT_MAX:
        return ks_p(reference, current)
    reference_right = np.searchsorted(reference, reference, side="right")
    current_right = np.searchsorted(current, reference, side="right")
    current_left = np.searchsorted(current, reference, side="left")
    at_reference = reference_right / n1 - current_right / n2
    # The window's last point before each next reference point (none left after the last: its
    # points there meet the reference's ECDF at 1, a difference of 0).
    next_left = np.append(current_left[1:], n2)
    occupied = next_left > current_left
    highest, lowest = float(at_reference.max()), float(at_reference.min())
    if occupied.any():
        lowest = min(lowest, float((reference_right[occupied] / n1 - next_left[occupied] / n2).min()))
    if current_left[0] > 0:  # window points below the reference's smallest: its ECDF is 0 there
        first = int(np.searchsorted(current, current[0], side="right"))
        highest = max(highest, 0 / n1 - first / n2)
        lowest = min(lowest, 0 / n1 - int(current_left[0]) / n2)
    lower = float(np.clip(-lowest, 0, 1))
    statistic = lower if lower > highest else highest
    larger, smaller = sorted([float(n1), float(n2)], reverse=True)
    p: float = float(np.clip(stats.kstwo.sf(statistic, np.round(larger * smaller / (larger + smaller))), 0, 1))
    return p


def binned_sorted(edges: list[float] | np.ndarray, ordered: np.ndarray) -> np.ndarray:
    """:func:`mlops.reference_profile.bin_counts` of a sorted sample: bin i holds edges[i-1] < x <= edges[i]."""
    cuts = np.r_[0, np.searchsorted(ordered, np.asarray(edges, dtype="float64"), side="right"), ordered.size]
    return np.diff(cuts)


def value_counts(values: np.ndarray) -> dict[str, int]:
    """Counts keyed by the value's text (numbers by repr, so discrete numeric values key exactly)."""
    distinct, counts = np.unique(values, return_counts=True)
    return {_key(v): int(c) for v, c in zip(distinct.tolist(), counts.tolist(), strict=True)}


def _key(value: object) -> str:
    return repr(float(value)) if isinstance(value, int | float) else str(value)


def discrete_reference(values: list[float], counts: list[int]) -> dict[str, int]:
    return {_key(v): c for v, c in zip(values, counts, strict=True)}
