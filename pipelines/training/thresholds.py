"""The decision threshold a trained model is exported with, chosen on validation scores: the F1-best
one, and for models that answer few distinct scores the same decisions a whole gap away from any score."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import precision_recall_curve


def best_f1_threshold(labels: np.ndarray, probs: np.ndarray) -> float:
    """The decision threshold of highest F1 on (validation) ``probs``."""
    precision, recall, thresholds = precision_recall_curve(labels, probs)
    # The last precision/recall pair has no threshold (recall 0 by convention).
    p, r = precision[:-1], recall[:-1]
    f1 = np.divide(2 * p * r, p + r, out=np.zeros_like(p), where=(p + r) > 0)
    return float(thresholds[int(np.argmax(f1))])


def between_scores_threshold(labels: np.ndarray, probs: np.ndarray) -> float:
    """:func:`best_f1_threshold` moved halfway down to the next lower validation score: the same decision
    on every validation row, and no score at the threshold itself.

    A converted model (trees, a scikit-learn estimator) answers few distinct scores, each shared by every
    row with the same leaves, and its served graph computes them in float32: at a threshold that is one of
    those scores, float32 rounding flips every row that has it (the export's parity check counts them,
    on the terminal-payments example tens of rows). Halfway to the next score they sit a whole gap away.
    """
    threshold = best_f1_threshold(labels, probs)
    below = np.asarray(probs, dtype=np.float64)
    below = below[below < threshold]
    return float((threshold + below.max()) / 2) if below.size else threshold
