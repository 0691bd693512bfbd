"""The score map (mlops.score_map): an isotonic reading of how a served probability turned out on the
labelled reference, kept in order, never certain, and absent where the reference cannot say."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mlops.contract import DataContract
from mlops.reference_profile import ReferenceProfile, build_profile
from mlops.score_map import MIN_CLASS_ROWS, fit_score_map

if TYPE_CHECKING:
    from conftest import Splits

import pytest

pytestmark = pytest.mark.unit


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.2, 3.0))
def test_the_map_is_a_non_decreasing_rate_strictly_inside_zero_and_one(seed: int, confidence: float) -> None:
    rng = np.random.default_rng(seed)
    truth = 1 / (1 + np.exp(-rng.normal(-3, 2, 3_000)))
    served = 1 / (1 + np.exp(-confidence * np.log(truth / (1 - truth))))
    score_map = fit_score_map(served, rng.random(truth.size) < truth, refits=5, seed=seed)
    if score_map is None:  # a draw with too few of a class
        return
    grid = np.linspace(0, 1, 201)
    for curve in (score_map.fit, *score_map.refits):
        rates = curve(grid)
        assert np.all(np.diff(rates) >= 0)
        assert np.all((rates > 0) & (rates < 1))


def test_an_under_confident_top_is_read_up_and_the_bulk_left_alone() -> None:
    """Scores served at half their log-odds above 0.5 (0.9 served as 0.75): the map reads the top back
    up toward the rate it turns out at, and leaves the calibrated bulk near what was served."""
    rng = np.random.default_rng(0)
    truth = 1 / (1 + np.exp(-rng.normal(-3, 2.5, 50_000)))
    logit = np.log(truth / (1 - truth))
    served = 1 / (1 + np.exp(-np.where(logit > 0, logit / 2, logit)))
    score_map = fit_score_map(served, rng.random(truth.size) < truth)
    assert score_map is not None
    assert abs(float(score_map.fit(np.array([0.75]))[0]) - 0.9) < 0.05
    assert abs(float(score_map.fit(np.array([0.1]))[0]) - 0.1) < 0.03
    assert len(score_map.refits) == 50


def test_no_map_without_enough_of_each_class_and_unlabelled_rows_left_out() -> None:
    rng = np.random.default_rng(1)
    probabilities = rng.random(5_000)
    few = np.zeros(5_000)
    few[: MIN_CLASS_ROWS - 1] = 1
    assert fit_score_map(probabilities, few) is None
    labels = (rng.random(5_000) < probabilities).astype("float64")
    labels[:1_000] = np.nan
    score_map = fit_score_map(probabilities, labels, refits=3)
    assert score_map is not None
    assert score_map.rows == 4_000
    assert score_map.positives == int(np.nansum(labels))


def test_the_profile_keeps_a_map_only_when_its_rows_carry_labels(splits: Splits, contract: DataContract) -> None:
    sample_frame = splits[0]
    rng = np.random.default_rng(2)
    probabilities = rng.random(len(sample_frame))
    labelled = sample_frame.assign(**{contract.label_column: (rng.random(len(sample_frame)) < probabilities)
                                      .astype("int64")})
    with_map = build_profile(labelled, contract, probabilities, 0.5)
    assert with_map.score_map is not None
    assert with_map.score_map.rows == len(sample_frame)
    unlabelled = build_profile(labelled.drop(columns=contract.label_column), contract, probabilities, 0.5)
    assert unlabelled.score_map is None
    # A profile written before maps existed still loads, and reads probabilities as served.
    older = with_map.model_dump(exclude={"score_map"})
    assert ReferenceProfile.model_validate(older).score_map is None
