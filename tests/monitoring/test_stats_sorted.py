"""The KS p-value and the bin counts read off a sorted window (monitoring.stats) equal scipy's
ks_2samp and the profile's bin_counts exactly, ties and samples beyond either's range included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from mlops.reference_profile import bin_counts
from monitoring.stats import KS_EXACT_MAX, binned_sorted, ks_p_sorted

pytestmark = pytest.mark.unit


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(KS_EXACT_MAX + 1, 40_000), st.integers(50, 3_000),
       st.sampled_from([0, 1, 2]), st.floats(-2.0, 2.0), st.floats(0.2, 3.0))
def test_ks_from_sorted_samples_is_scipys_to_the_last_bit(seed: int, window: int, reference: int, decimals: int,
                                                          shift: float, spread: float) -> None:
    rng = np.random.default_rng(seed)
    # Rounded values tie within and across the samples; the shift and spread move the window past
    # either end of the reference.
    ours = np.sort(np.round(rng.normal(0, 1, reference), decimals))
    live = np.sort(np.round(rng.normal(shift, spread, window), decimals))
    assert ks_p_sorted(ours, live) == float(scipy_stats.ks_2samp(ours, live).pvalue)
    assert ks_p_sorted(live, ours) == float(scipy_stats.ks_2samp(live, ours).pvalue)


def test_small_samples_take_scipys_exact_branch() -> None:
    rng = np.random.default_rng(1)
    ours, live = np.sort(rng.normal(0, 1, 300)), np.sort(rng.normal(0.3, 1, 500))
    assert ks_p_sorted(ours, live) == float(scipy_stats.ks_2samp(ours, live).pvalue)


def test_identical_and_disjoint_samples() -> None:
    values = np.sort(np.random.default_rng(2).normal(0, 1, 20_000))
    assert ks_p_sorted(values, values) == float(scipy_stats.ks_2samp(values, values).pvalue) == 1.0
    assert ks_p_sorted(values, values + 100) == float(scipy_stats.ks_2samp(values, values + 100).pvalue)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 5_000))
def test_bin_counts_of_a_sorted_sample_are_the_profiles(seed: int, edges: int, rows: int) -> None:
    rng = np.random.default_rng(seed)
    cuts = np.unique(np.round(rng.normal(0, 1, edges), 1))
    values = np.round(rng.normal(0, 1.5, rows), 1)  # values on the edges themselves too
    assert binned_sorted(cuts, np.sort(values)).tolist() == bin_counts(cuts, values).tolist()
