"""The score map: how often a served probability turned out positive on the labelled reference.

A model calibrated by one Platt scaling fitted over all of validation is calibrated where most rows
lie (near 0) and can be under-confident where the decisions are made: the demo's model served 0.5-0.8
to transactions of which about 95 % were fraud. Estimating precision from those probabilities then
misses by 0.08. So, as NannyML's CBPE does, the estimate reads the probabilities through an isotonic
regression of the reference's labels on its served probabilities (the held-out split the reference
profile is built from, scored out of sample): non-decreasing, so it never reorders scores or changes
a decision. The map is itself estimated from a finite reference (70 frauds in the demo's), so it
keeps ``REFITS`` bootstrap refits too: the estimate's interval draws its labels through them, and
carries the map's uncertainty besides the labels' own.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

# Fewer positives or negatives than this on the reference: no map (the probabilities are read as served).
MIN_CLASS_ROWS = 20
REFITS = 50
MAX_ROWS = 200_000  # a larger reference is sampled to this many rows (seeded) before the fits
SEED = 0


class Curve(BaseModel):
    """A non-decreasing piecewise-linear function given by its knots, flat beyond the outer ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    x: list[float]
    y: list[float]

    def __call__(self, probabilities: np.ndarray) -> np.ndarray:
        rates: np.ndarray = np.interp(np.asarray(probabilities, dtype="float64"), self.x, self.y)
        return rates


class ScoreMap(BaseModel):
    """The isotonic fit of the reference's labels on its probabilities, and its bootstrap refits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fit: Curve
    refits: list[Curve]
    rows: int
    positives: int

    def refitted(self, probabilities: np.ndarray) -> np.ndarray:
        """``probabilities`` read through every refit: one row per refit."""
        return np.stack([curve(probabilities) for curve in self.refits])


def _isotonic(probabilities: np.ndarray, labels: np.ndarray) -> Curve:
    """The isotonic fit, each block's rate the posterior mean under Jeffreys' prior (half a positive in
    one more row): a block of a few rows, all positive, would otherwise say 1.0 on too little, and a
    rate of 1.0 or 0.0 leaves nothing for the interval to draw."""
    from sklearn.isotonic import IsotonicRegression

    fitted = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(probabilities, labels)
    blocks, block = np.unique(fitted.predict(probabilities), return_inverse=True)
    rows = np.bincount(block, minlength=blocks.size)
    posterior = (blocks * rows + 0.5) / (rows + 1.0)
    knots = np.searchsorted(blocks, fitted.y_thresholds_).clip(0, blocks.size - 1)
    # Blocks' posteriors stay in order (a larger rate over more rows can move less): kept non-decreasing.
    return Curve(x=fitted.X_thresholds_.tolist(), y=np.maximum.accumulate(posterior[knots]).tolist())


def fit_score_map(probabilities: np.ndarray, labels: np.ndarray, *, refits: int = REFITS,
                  seed: int = SEED) -> ScoreMap | None:
    """The map of ``labels`` (0/1) on ``probabilities``; None when either class has fewer than
    ``MIN_CLASS_ROWS`` labelled rows (too few to say how a probability turns out); unlabelled rows
    (NaN) are left out."""
    y = np.asarray(labels, dtype="float64")
    labelled = ~np.isnan(y)
    p, y = np.asarray(probabilities, dtype="float64")[labelled], y[labelled]
    rng = np.random.default_rng(seed)
    if p.size > MAX_ROWS:
        kept = rng.choice(p.size, size=MAX_ROWS, replace=False)
        p, y = p[kept], y[kept]
    positives = int(y.sum())
    if min(positives, p.size - positives) < MIN_CLASS_ROWS:
        return None
    draws = (rng.integers(0, p.size, p.size) for _ in range(refits))
    return ScoreMap(fit=_isotonic(p, y), refits=[_isotonic(p[rows], y[rows]) for rows in draws], rows=int(p.size),
                    positives=positives)
