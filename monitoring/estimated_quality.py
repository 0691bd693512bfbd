"""Quality estimated without labels (confidence-based performance estimation, as NannyML's CBPE).

With calibrated probabilities a prediction's label is positive with probability p, so a window's
expected confusion counts at the served threshold are TP = sum of p over the predicted positives,
FP = sum of (1 - p) over them and FN = sum of p over the predicted negatives; precision, recall and
F1 follow from them. PR-AUC is the average precision of the expected curve: expected precision and
recall at every cutoff of the ranked scores.

The 95 % interval is where the realized metric falls when labels are drawn ~ Bernoulli(p). Labels are
drawn per bin, not per row: each side of the threshold, ranked by score, is cut into bins of equal
expected positives, and a bin's positives drawn as Binomial(rows, mean p) ``DRAWS`` times. That costs
the same at a thousand rows and ten million, and its variance exceeds the exact one by the spread of
p inside a bin only. Precision, recall and F1 take the draws' percentiles; PR-AUC, whose draws rank
bins rather than rows, takes their offsets around the draws' mean, placed around its expected value.

A probability counts as the rate the version's score map gives it (mlops.score_map: an isotonic fit
of the labelled reference's outcomes on its probabilities), when the version's profile has one: the
demo's model is calibrated in the bulk but under-confident where it flags, and without the map its
estimated precision missed the realized by 0.085 in every window. Draws go through the map's
bootstrap refits in turn, so the interval also carries how little the reference says about the map.

A drop below the reference's estimate (the same estimate on the probabilities the version was
profiled with, at its threshold) raises WARNING or CRITICAL when it is material and real: at least
the margin, and the reference's estimate above the window's whole interval. A version whose
calibration failed its last check with labels is not trusted: its level stays INFO, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from mlops.reference_profile import ReferenceProfile
from mlops.score_map import ScoreMap
from monitoring.drift import Level, max_level
from monitoring.log_window import LogWindow

METRICS = ("precision", "recall", "f1", "pr_auc")
JUDGED = ("f1", "pr_auc")  # the drops that raise a level (precision and recall move against each other)
DRAWS = 1000
BINS = 200
SEED = 0


class EstimateThresholds(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    drop_warning: float = Field(default=0.05, gt=0)
    drop_critical: float = Field(default=0.10, gt=0)

    def level(self, drop: float) -> Level:
        return "CRITICAL" if drop >= self.drop_critical else "WARNING" if drop >= self.drop_warning else "INFO"


class Interval(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    estimate: float
    low: float
    high: float

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


class QualityEstimate(BaseModel):
    """Expected precision, recall, F1 and PR-AUC of some predictions, each with its 95 % interval."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int
    predicted_positives: int
    expected_positives: float
    precision: Interval
    recall: Interval
    f1: Interval
    pr_auc: Interval

    def metric(self, name: str) -> Interval:
        interval: Interval = getattr(self, name)
        return interval


class EstimatedQuality(BaseModel):
    """One version and role in one window: its estimate, the reference's, and the level they give."""

    model_config = ConfigDict(extra="forbid")

    model_name: str
    model_version: str
    role: str
    estimate: QualityEstimate
    reference: QualityEstimate | None = None
    level: Level = "INFO"
    reliable: bool = True
    note: str = ""

    def drop(self, metric: str) -> float | None:
        if self.reference is None:
            return None
        return self.reference.metric(metric).estimate - self.estimate.metric(metric).estimate


def expected_counts(probabilities: np.ndarray, predicted: np.ndarray) -> tuple[float, float, float]:
    """Expected (TP, FP, FN) at the decisions ``predicted`` when labels are drawn ~ Bernoulli(p)."""
    p = np.asarray(probabilities, dtype="float64")
    flagged = np.asarray(predicted, dtype=bool)
    return float(p[flagged].sum()), float((1 - p[flagged]).sum()), float(p[~flagged].sum())


def _ratios(tp: np.ndarray, fn: np.ndarray, flagged: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Precision, recall and F1 from (simulated or expected) counts; 0 where undefined, as labels.py scores."""
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(flagged > 0, tp / max(flagged, 1), 0.0)
        recall = np.where(tp + fn > 0, tp / (tp + fn), 0.0)
        f1 = np.where(flagged + tp + fn > 0, 2 * tp / (flagged + tp + fn), 0.0)
    return precision, recall, f1


def expected_average_precision(probabilities: np.ndarray) -> float:
    """Average precision of the expected curve: at the k-th highest score, expected precision is the
    sum of the top k probabilities over k, and recall grows by that row's p over the sum of all."""
    p = np.sort(np.asarray(probabilities, dtype="float64"))[::-1]
    total = float(p.sum())
    if total == 0:
        return 0.0
    terms = np.cumsum(p)  # the hits at each k, then (in place: ten million rows) p * hits / k
    terms *= p
    terms /= np.arange(1, p.size + 1)
    return float(np.sum(terms) / total)


def _bins(ranked: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``count`` bins of equal expected positives each of the scores ranked high to low falls in,
    and the bins' row counts (every bin non-empty: the indices are renumbered over the occupied ones)."""
    if ranked.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    # In place, and renumbered by counting instead of np.unique's sort: ten million rows took 0.4 GB.
    position = np.cumsum(ranked)
    total = float(position[-1]) or 1.0
    position -= ranked / 2
    position /= total
    position *= count
    index = np.minimum(position, count - 1, out=position).astype(np.int64)
    del position
    occupied = np.flatnonzero(np.bincount(index, minlength=count))
    renumbered = np.zeros(count, dtype=np.int64)
    renumbered[occupied] = np.arange(occupied.size)
    index = renumbered[index]
    return index, np.bincount(index, minlength=occupied.size).astype("float64")


def _bin_means(index: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    means: np.ndarray = np.bincount(index, weights=values, minlength=rows.size) / np.maximum(rows, 1)
    return means


def estimate_quality(probabilities: np.ndarray, predicted: np.ndarray, *, score_map: ScoreMap | None = None,
                     draws: int = DRAWS, seed: int = SEED) -> QualityEstimate:
    """The expected metrics of predictions scored ``probabilities`` and decided ``predicted`` (True:
    the positive decision), with 95 % intervals from ``draws`` simulated label draws.

    With a ``score_map`` a probability counts as the rate the map gives it, and draw i draws its
    labels through the map's refit i (cycling), so the interval carries the map's uncertainty too.
    """
    served = np.asarray(probabilities, dtype="float64")
    flagged_mask = np.asarray(predicted, dtype=bool)
    flagged = int(flagged_mask.sum())
    p = served if score_map is None else score_map.fit(served)
    tp, _, fn = expected_counts(p, flagged_mask)
    # One order for both sides: the flagged rows first, each side by p high to low, ties in row order.
    order = np.lexsort((-p, ~flagged_mask))
    ranked = p[order]
    served_ranked = served[order] if score_map is not None else ranked
    del order
    positive_side, negative_side = ranked[:flagged], ranked[flagged:]
    # Bins shared between the sides by their expected positives, at least one per non-empty side.
    share = tp / (tp + fn) if tp + fn else 0.5
    top_index, top_rows = _bins(positive_side, max(1, round(BINS * share)))
    low_index, low_rows = _bins(negative_side, max(1, BINS - round(BINS * share)))
    rows = np.r_[top_rows, low_rows]
    rates = np.r_[_bin_means(top_index, top_rows, positive_side), _bin_means(low_index, low_rows, negative_side)]
    per_draw = rates[np.newaxis, :]
    if score_map is not None:
        # Each bin's mean served probability read through every refit, plus what reading each row
        # through the fit adds to reading the bin's mean (the curves bend little inside a bin): exact
        # would read every row through every refit, 50 passes over ten million rows.
        centres = np.r_[_bin_means(top_index, top_rows, served_ranked[:flagged]),
                        _bin_means(low_index, low_rows, served_ranked[flagged:])]
        per_draw = np.clip(score_map.refitted(centres) + (rates - score_map.fit(centres)), 0.0, 1.0)
    rng = np.random.default_rng(seed)
    hits = rng.binomial(rows.astype(np.int64), per_draw[np.arange(draws) % len(per_draw)])
    drawn_tp, drawn_fn = hits[:, :len(top_rows)].sum(axis=1), hits[:, len(top_rows):].sum(axis=1)
    simulated = dict(zip(("precision", "recall", "f1"), _ratios(drawn_tp, drawn_fn, flagged), strict=True))
    expected = dict(zip(("precision", "recall", "f1"), _ratios(np.array(tp), np.array(fn), flagged), strict=True))
    intervals = {name: _percentiles(float(expected[name]), simulated[name]) for name in expected}
    positives = np.cumsum(hits, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        drawn_ap = np.nan_to_num(np.sum(hits * positives / np.cumsum(rows), axis=1) / positives[:, -1])
    intervals["pr_auc"] = _around(expected_average_precision(ranked), drawn_ap)
    return QualityEstimate(rows=int(p.size), predicted_positives=flagged, expected_positives=tp + fn, **intervals)


def _percentiles(expected: float, drawn: np.ndarray) -> Interval:
    low, high = np.percentile(drawn, [2.5, 97.5])
    return Interval(estimate=expected, low=min(float(low), expected), high=max(float(high), expected))


def _around(expected: float, drawn: np.ndarray) -> Interval:
    low, high = np.percentile(drawn, [2.5, 97.5]) - float(np.mean(drawn))
    return Interval(estimate=expected, low=max(0.0, expected + float(low)), high=min(1.0, expected + float(high)))


def reference_estimate(profile: ReferenceProfile, score_map: ScoreMap | None = None) -> QualityEstimate | None:
    """The estimate on the profiled probabilities at the version's threshold, through ``score_map``
    (default: the profile's own); None when the profile predates the recorded threshold."""
    if profile.threshold is None:
        return None
    reference = profile.probability
    p = np.asarray(reference.sample or np.repeat(reference.values, reference.counts), dtype="float64")
    return estimate_quality(p, p >= profile.threshold, score_map=score_map or profile.score_map)


def judge_estimate(estimated: EstimatedQuality, limits: EstimateThresholds,
                   unreliable: str | None = None) -> EstimatedQuality:
    """The level of the judged metrics' drops below the reference; INFO, with why, when it cannot be trusted."""
    if unreliable is not None:
        return estimated.model_copy(update={"level": "INFO", "reliable": False,
                                            "note": f"estimate unreliable: {unreliable}"})
    if estimated.reference is None:
        return estimated.model_copy(update={"level": "INFO", "note": "no reference estimate: the version's profile "
                                            "predates its recorded threshold (retrain to record it)"})
    levels: list[Level] = []
    notes = []
    for metric in JUDGED:
        drop, ours = estimated.drop(metric) or 0.0, estimated.estimate.metric(metric)
        level = limits.level(drop)
        reference = estimated.reference.metric(metric).estimate
        if level != "INFO" and reference <= ours.high:
            notes.append(f"{metric} drop {drop:.3f} within the window's interval (high {ours.high:.3f})")
            level = "INFO"
        elif level != "INFO":
            notes.append(f"estimated {metric} {ours.estimate:.3f} < reference {reference:.3f} by {drop:.3f}")
        levels.append(level)
    return estimated.model_copy(update={"level": max_level(levels), "note": "; ".join(notes)})


def estimate_roles(window: pd.DataFrame | LogWindow, profile: ReferenceProfile, positive: str,
                   limits: EstimateThresholds, *, model_name: str, model_version: str, unreliable: str | None = None,
                   score_map: ScoreMap | None = None) -> list[EstimatedQuality]:
    """One version's window judged per role (champion, challenger, ...), predicted positive where the
    logged decision is ``positive``: the decision the served threshold gave. Window and reference are
    read through the same map: ``score_map`` (refitted on labelled traffic) or else the profile's."""
    score_map = score_map or profile.score_map
    reference = reference_estimate(profile, score_map)
    judged = []
    for role, probabilities, predicted in _by_role(window, positive):
        estimate = estimate_quality(probabilities, predicted, score_map=score_map)
        estimated = EstimatedQuality(model_name=model_name, model_version=model_version, role=role,
                                     estimate=estimate, reference=reference)
        judged.append(judge_estimate(estimated, limits, unreliable))
    return judged


def _by_role(window: pd.DataFrame | LogWindow, positive: str) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(role, probabilities, predicted positive) per role, roles sorted; a log without roles is the champion's."""
    if isinstance(window, LogWindow):  # read as codes: a Python string per row cost gigabytes at 10 M rows
        groups = window.groups(["role"]) if "role" in window else iter([(("champion",), window)])
        for (role,), served in groups:
            decisions, labels = served.codes("decision")
            predicted = decisions == labels.index(positive) if positive in labels else np.zeros(len(served), bool)
            yield role, served["probability"].to_numpy(dtype="float64"), predicted
        return
    roles = window["role"] if "role" in window else pd.Series("champion", index=window.index)
    for role, rows in window.groupby(roles, sort=True):
        yield str(role), rows["probability"].to_numpy(dtype="float64"), (rows["decision"] == positive).to_numpy()
