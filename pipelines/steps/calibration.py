"""Probability calibration: Platt scaling fitted on validation, and the reliability diagram (the
measures that judge it are the core's, mlops.calibration).

Training weights positives up (class weights), so raw sigmoid scores overstate the positive rate. A
two-parameter logistic fit on the validation logits maps them back; the model applies it inside
its forward pass, so the exported ONNX graph serves the calibrated probability.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression

from mlops.calibration import CalibrationReport

log = logging.getLogger(__name__)


def fit_platt(logits: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(scale, bias) so that sigmoid(scale * logit + bias) matches the observed positive rate.

    The scale stays positive: calibration may move scores, never reorder them. When the best fit
    has a scale <= 0 (validation shows no signal in the ranking), only the bias is fitted (scale 1),
    which keeps the model's ranking and its decisions and still matches the mean positive rate.
    """
    logits = logits.astype(np.float64)
    # A large C: plain maximum likelihood; two parameters cannot overfit thousands of rows.
    fit = LogisticRegression(C=1e6, max_iter=1000).fit(logits.reshape(-1, 1), labels)
    scale, bias = float(fit.coef_[0, 0]), float(fit.intercept_[0])
    if scale > 0:
        return scale, bias
    log.warning("validation scores carry no ranking signal (Platt scale %.3g); fitting the bias only", scale)
    return 1.0, _bias_only(logits, labels.astype(np.float64))


def _bias_only(logits: np.ndarray, labels: np.ndarray) -> float:
    """The maximum-likelihood shift b: mean(sigmoid(logit + b)) = positive rate (bisection; it is monotone in b)."""
    low, high = -60.0, 60.0
    target = float(labels.mean())
    for _ in range(200):
        middle = (low + high) / 2
        if float(np.mean(1.0 / (1.0 + np.exp(-(logits + middle))))) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def plot_reliability(report: CalibrationReport, path: Path, title: str, *, threshold: float | None = None) -> None:
    """Reliability diagram (mean predicted vs observed positive rate per bin) as a PNG; ``threshold``, when
    given, is drawn where the model's decision flips."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect calibration")
    ax.plot([b.mean_predicted for b in report.bins], [b.observed_rate for b in report.bins], marker="o",
            label=f"model (ECE {report.ece:.4f}, Brier {report.brier:.4f})")
    if threshold is not None:
        ax.axvline(threshold, color="black", linestyle="--", label=f"operating threshold {threshold:.3f}")
    ax.set(xlabel="mean predicted probability", ylabel="observed positive rate", title=title, xlim=(0, 1),
           ylim=(0, 1))
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
