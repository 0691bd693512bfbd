"""Canary analysis: the canary (role ``canary``) judged against the champion on the same window of the
prediction log, check by check, into one verdict: promote, roll back or wait.

Checks: error rate (the failure log's rows each arm failed to score beside its answered rows),
latency p99, score distribution (PSI and KS of the probabilities), positive
decision rate and, once labels have arrived, PR-AUC with a bootstrap interval of the difference.
The arms serve different customers (the canary is sticky per customer), so the service also scores
the canary's rows with the champion off the response path (role ``champion-paired``): the PR-AUC
interval is a paired bootstrap over the canary's labelled rows, both models' scores resampled
together; without enough such rows (a log from before), each arm is resampled on its own
(unpaired). A check below its minimum sample is "not judged yet"; a difference fails only when it
is both material (past a margin) and not chance (past the significance level), so two arms of one
model do not fail by noise.

Two different models score the same traffic differently by design (a better one is sharper, its
threshold elsewhere), and evaluate has already judged that difference on held-out data. So when
both versions have a reference profile (their scores on evaluate's held-out split), the score and
decision checks compare each arm's live traffic with its own reference: the canary fails when its
scores moved from what evaluate saw by more than the champion's moved from its own (a broken
online feature, a model trained on an unrepresentative sample), not for being another model.
Without both profiles the arms are compared with each other directly. :func:`run_canary` reads the registry, judges the
canary's window since it started and, when asked, acts on the verdict with its figures audited.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict
from scipy import stats

from mlops import registry
from mlops.contract import load_contract
from mlops.errors import InputError, NotFoundError
from mlops.failure_log import FailureRecord, failure_dir, read_failures
from mlops.prediction_log import PAIRED_ROLE, log_dir
from mlops.reference_profile import ReferenceProfile
from mlops.registry_audit import VerdictRecord, record_verdict
from mlops.registry_records import canary_started, revise_decision
from monitoring import metrics
from monitoring.labels import ID, LABEL, average_precision, join_labels, read_labels
from monitoring.references import fetch_profile
from monitoring.settings import MonitoringSettings
from monitoring.stats import binomial_p, ks_p, psi_binned, psi_from_counts
from monitoring.window import WindowSpec, read_window

CANARY, CHAMPION = "canary", "champion"
Status = Literal["pass", "fail", "not judged", "skipped"]
Verdict = Literal["promote", "roll back", "wait"]
_METRIC_KEY = re.compile(r"[^\w\-. /]")
_SCORE_BINS = 10
_BOOTSTRAP_DRAWS = 1000
_SEED = 0  # the same window gives the same interval, so a verdict can be re-derived
References = tuple[ReferenceProfile, ReferenceProfile]  # (the canary's, the champion's)


class CanaryCheck(BaseModel):
    """One check: each arm's figure, the comparison's figures, and what it says."""

    model_config = ConfigDict(extra="forbid")

    name: str
    status: Status
    canary: float | None = None
    champion: float | None = None
    figures: dict[str, float] = {}
    note: str = ""

    def line(self) -> str:
        arms = "" if self.canary is None or self.champion is None else \
            f"canary {self.canary:.4g} vs champion {self.champion:.4g}"
        figures = ", ".join(f"{k} {v:.4g}" for k, v in self.figures.items())
        return "; ".join(p for p in (f"{self.name}: {self.status}", arms, figures, self.note) if p)


class CanaryVerdict(BaseModel):
    """The verdict on one canary with every check behind it."""

    model_config = ConfigDict(extra="forbid")

    verdict: Verdict
    reason: str
    canary_version: str | None
    champion_version: str | None
    canary_rows: int
    champion_rows: int
    checks: list[CanaryCheck]


def _not_judged(name: str, have: int, need: int, what: str = "rows") -> CanaryCheck:
    return CanaryCheck(name=name, status="not judged", note=f"not judged yet: {have} {what}, needs {need}")


def _error_rate(canary: pd.DataFrame, champion: pd.DataFrame, failures: list[FailureRecord] | None,
                canary_version: str | None, settings: MonitoringSettings) -> CanaryCheck:
    """Each arm's failed rows over its answered and failed rows (the failure log beside the prediction
    log); fails when the canary's rate passes the champion's by the margin and Fisher's exact test
    (one-sided) says it is not chance. Rows a failed canary handed to the champion count as the
    champion's answers."""
    if failures is None:
        return CanaryCheck(name="error rate", status="skipped", note="no failure log was read")
    failed = {arm: sum(f.rows for f in failures if f.role == arm and (
        arm == CHAMPION or canary_version is None or f.model_version == canary_version)) for arm in (CANARY, CHAMPION)}
    totals = {CANARY: len(canary) + failed[CANARY], CHAMPION: len(champion) + failed[CHAMPION]}
    need = settings.canary_min_rows
    if min(totals.values()) < need:
        return _not_judged("error rate", min(totals.values()), need)
    ours, theirs = failed[CANARY] / totals[CANARY], failed[CHAMPION] / totals[CHAMPION]
    table = [[failed[CANARY], len(canary)], [failed[CHAMPION], len(champion)]]
    p_value = float(stats.fisher_exact(table, alternative="greater").pvalue)
    failing = ours - theirs > settings.canary_error_rate_margin and p_value < settings.canary_significance
    return CanaryCheck(name="error rate", status="fail" if failing else "pass", canary=ours, champion=theirs,
                       figures={"canary failed rows": float(failed[CANARY]),
                                "champion failed rows": float(failed[CHAMPION]),
                                "margin": settings.canary_error_rate_margin, "p": p_value})


def _latency(canary: pd.DataFrame, champion: pd.DataFrame, settings: MonitoringSettings) -> CanaryCheck:
    timed = [arm["latency_s"].dropna().to_numpy(dtype="float64") if "latency_s" in arm else np.empty(0)
             for arm in (canary, champion)]
    have = min(t.size for t in timed)
    if have < settings.canary_min_latency_rows:
        return _not_judged("latency p99", have, settings.canary_min_latency_rows, "timed rows")
    ours, theirs = (float(np.quantile(t, 0.99)) for t in timed)
    ratio = ours / theirs if theirs > 0 else float("inf") if ours > 0 else 1.0
    # Both limits: on millisecond requests a busy node alone moves a p99 by a ratio of 1.5 or more.
    excess_ms = (ours - theirs) * 1000
    failing = ratio > settings.canary_latency_ratio and excess_ms > settings.canary_latency_floor_ms
    return CanaryCheck(name="latency p99", status="fail" if failing else "pass", canary=ours, champion=theirs,
                       figures={"ratio": ratio, "limit": settings.canary_latency_ratio, "excess ms": excess_ms,
                                "floor ms": settings.canary_latency_floor_ms})


def _scores(canary: np.ndarray, champion: np.ndarray, settings: MonitoringSettings,
            references: References | None) -> CanaryCheck:
    if references is not None and all(r.probability.kind == "continuous" for r in references):
        return _scores_against_references(canary, champion, settings, references)
    # The champion's quantiles as bins, as the drift job bins live scores on the reference's.
    edges = np.unique(np.quantile(champion, np.linspace(0, 1, _SCORE_BINS + 1)[1:-1]))
    counts = [np.bincount(np.searchsorted(edges, arm, side="left"), minlength=edges.size + 1).astype("float64")
              for arm in (champion, canary)]
    psi, p_value = psi_from_counts(*counts), ks_p(champion, canary)
    failing = psi > settings.canary_score_psi and p_value < settings.canary_significance
    return CanaryCheck(name="score distribution", status="fail" if failing else "pass",
                       canary=float(np.mean(canary)), champion=float(np.mean(champion)),
                       figures={"PSI": psi, "PSI limit": settings.canary_score_psi, "KS p": p_value},
                       note="arm figures are mean probabilities; no reference profiles: the arms compared directly")


def _scores_against_references(canary: np.ndarray, champion: np.ndarray, settings: MonitoringSettings,
                               references: References) -> CanaryCheck:
    """Each arm's PSI on its own reference's bins; the canary fails when its PSI passes the champion's by
    more than the limit and its KS test against its reference says it is not chance."""
    ours, theirs = (r.probability for r in references)
    psi = psi_binned(ours.edges, ours.bin_counts, canary)
    champion_psi = psi_binned(theirs.edges, theirs.bin_counts, champion)
    p_value = ks_p(np.asarray(ours.sample, dtype="float64"), canary)
    failing = psi - champion_psi > settings.canary_score_psi and p_value < settings.canary_significance
    return CanaryCheck(name="score distribution", status="fail" if failing else "pass",
                       canary=float(np.mean(canary)), champion=float(np.mean(champion)),
                       figures={"PSI": psi, "champion PSI": champion_psi, "PSI limit": settings.canary_score_psi,
                                "KS p": p_value},
                       note="arm figures are mean probabilities; PSI and KS p against each arm's own reference scores")


def _reference_rate(profile: ReferenceProfile) -> float:
    """The share of the reference's scores at or above the version's threshold; 0 without a threshold."""
    sample = np.asarray(profile.probability.sample, dtype="float64")
    return 0.0 if profile.threshold is None or sample.size == 0 else float(np.mean(sample >= profile.threshold))


def _decision_rate(canary: np.ndarray, champion: np.ndarray, settings: MonitoringSettings,
                   references: References | None) -> CanaryCheck:
    expected = (_reference_rate(references[0]), _reference_rate(references[1])) if references else (0.0, 0.0)
    if min(expected) > 0:
        return _decision_rate_against_references(canary, champion, settings, expected)
    ours, theirs = float(canary.mean()), float(champion.mean())
    pooled = (canary.sum() + champion.sum()) / (canary.size + champion.size)
    spread = np.sqrt(pooled * (1 - pooled) * (1 / canary.size + 1 / champion.size))
    p_value = float(2 * stats.norm.sf(abs(ours - theirs) / spread)) if spread > 0 else 1.0
    ratio = ours / theirs if theirs > 0 else float("inf") if ours > 0 else 1.0
    failing = max(ratio, 1 / ratio) > settings.canary_decision_rate_ratio and p_value < settings.canary_significance
    return CanaryCheck(name="decision rate", status="fail" if failing else "pass", canary=ours, champion=theirs,
                       figures={"ratio": ratio, "limit": settings.canary_decision_rate_ratio, "p": p_value})


def _decision_rate_against_references(canary: np.ndarray, champion: np.ndarray, settings: MonitoringSettings,
                                      expected: tuple[float, float]) -> CanaryCheck:
    """Each arm's positive decisions against what its reference rate expects on its rows; ``ratio`` is the
    canary's observed/expected over the champion's. The test: given both arms' positives, the canary's
    share of them against its share of the expected ones (exact binomial: a ratio of Poisson rates)."""
    observed = (int(canary.sum()), int(champion.sum()))
    wanted = (canary.size * expected[0], champion.size * expected[1])
    ratio = ((observed[0] / wanted[0]) / (observed[1] / wanted[1]) if observed[1]
             else float("inf") if observed[0] else 1.0)
    p_value = binomial_p(observed[0], sum(observed), wanted[0] / sum(wanted))
    material = ratio == 0 or max(ratio, 1 / ratio) > settings.canary_decision_rate_ratio
    return CanaryCheck(name="decision rate", status="fail" if material and p_value < settings.canary_significance
                       else "pass", canary=float(canary.mean()), champion=float(champion.mean()),
                       figures={"ratio": ratio, "limit": settings.canary_decision_rate_ratio, "p": p_value,
                                "canary reference": expected[0], "champion reference": expected[1]},
                       note="ratio: each arm's rate over its reference's, canary over champion")


def _bootstrap_pr_auc(labels: np.ndarray, scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    draws = rng.integers(0, labels.size, size=(_BOOTSTRAP_DRAWS, labels.size))
    return np.array([average_precision(labels[d], scores[d]) for d in draws])


def _pr_auc(canary: pd.DataFrame, champion: pd.DataFrame, paired: pd.DataFrame,
            settings: MonitoringSettings) -> CanaryCheck:
    """PR-AUC of canary minus champion with a bootstrap interval: paired, on the canary's labelled rows
    both models scored (the champion's score logged beside the canary's answer), when there are
    enough of them; else unpaired, each arm's own rows resampled on their own."""
    both = canary[[ID, LABEL, "probability"]].merge(
        paired[[ID, "probability"]].drop_duplicates(ID, keep="last"), on=ID, suffixes=("", "_champion"))
    if len(both) >= settings.canary_min_labelled and int(both[LABEL].sum()) >= settings.canary_min_positives:
        labels = both[LABEL].to_numpy(dtype="int64")
        ours_scores, theirs_scores = (both[c].to_numpy(dtype="float64")
                                      for c in ("probability", "probability_champion"))
        draws = np.random.default_rng(_SEED).integers(0, labels.size, size=(_BOOTSTRAP_DRAWS, labels.size))
        differences = np.array([average_precision(labels[d], ours_scores[d])
                                - average_precision(labels[d], theirs_scores[d]) for d in draws])
        # Rows without the champion's score (a busy service dropped it, or logged it before pairing)
        # are left out of the pairs, never read as a score: both models are judged on the same rows.
        rows = (f"the canary's {labels.size}" if labels.size == len(canary) else
                f"{labels.size} of the canary's {len(canary)}")
        return _pr_auc_check(average_precision(labels, ours_scores), average_precision(labels, theirs_scores),
                             differences, settings, {"paired rows": float(labels.size)},
                             f"paired: both models' scores of {rows} labelled rows")
    labelled = min(len(canary), len(champion))
    positives = min(int(canary[LABEL].sum()), int(champion[LABEL].sum()))
    if labelled < settings.canary_min_labelled:
        return _not_judged("PR-AUC", labelled, settings.canary_min_labelled, "labelled rows")
    if positives < settings.canary_min_positives:
        return _not_judged("PR-AUC", positives, settings.canary_min_positives, "positive labels")
    arms = [(arm[LABEL].to_numpy(dtype="int64"), arm["probability"].to_numpy(dtype="float64"))
            for arm in (canary, champion)]
    rng = np.random.default_rng(_SEED)
    differences = _bootstrap_pr_auc(*arms[0], rng) - _bootstrap_pr_auc(*arms[1], rng)
    return _pr_auc_check(average_precision(*arms[0]), average_precision(*arms[1]), differences, settings, {},
                         "unpaired: too few of the canary's rows have the champion's score beside them")


def _pr_auc_check(ours: float, theirs: float, differences: np.ndarray, settings: MonitoringSettings,
                  extra: dict[str, float], note: str) -> CanaryCheck:
    alpha = settings.canary_significance
    low, high = (float(q) for q in np.quantile(differences, [alpha / 2, 1 - alpha / 2]))
    failing = high < -settings.canary_pr_auc_margin
    return CanaryCheck(name="PR-AUC", status="fail" if failing else "pass", canary=ours, champion=theirs,
                       figures={"difference": ours - theirs, f"{1 - alpha:.0%} low": low, f"{1 - alpha:.0%} high": high,
                                "margin": settings.canary_pr_auc_margin, **extra}, note=note)


def _sized(name: str, canary: pd.DataFrame, champion: pd.DataFrame, need: int,
           judge: Callable[[], CanaryCheck]) -> CanaryCheck:
    have = min(len(canary), len(champion))
    return _not_judged(name, have, need) if have < need else judge()


def judge_canary(window: pd.DataFrame, labels: pd.DataFrame | None, settings: MonitoringSettings, *,
                 positive: str, canary_version: str | None = None, references: References | None = None,
                 failures: list[FailureRecord] | None = None) -> CanaryVerdict:
    """Judge the window's canary rows (of ``canary_version`` when given) against its champion rows.

    ``labels``: (event_id, label) as :func:`monitoring.labels.read_labels` gives them, or None before
    any arrived; ``positive``: the decision that predicts a positive label (the contract's);
    ``references``: the canary's and the champion's reference profiles, when both have one;
    ``failures``: the failure log over the same time (None: not read, the error rate is skipped).
    """
    canary = window[window["role"] == CANARY]
    if canary_version is not None:
        canary = canary[canary["model_version"] == canary_version]
    champion = window[window["role"] == CHAMPION]
    paired = window[(window["role"] == PAIRED_ROLE) & window["model_version"].isin(set(champion["model_version"]))]
    need = settings.canary_min_rows
    ours, theirs = (arm["probability"].to_numpy(dtype="float64") for arm in (canary, champion))
    our_flags, their_flags = ((arm["decision"] == positive).to_numpy() for arm in (canary, champion))
    checks = [
        _error_rate(canary, champion, failures, canary_version, settings),
        _latency(canary, champion, settings),
        _sized("score distribution", canary, champion, need, lambda: _scores(ours, theirs, settings, references)),
        _sized("decision rate", canary, champion, need,
               lambda: _decision_rate(our_flags, their_flags, settings, references)),
        _pr_auc(join_labels(canary, labels), join_labels(champion, labels), join_labels(paired, labels), settings)
        if labels is not None
        else _not_judged("PR-AUC", 0, settings.canary_min_labelled, "labelled rows"),
    ]
    failing = [c for c in checks if c.status == "fail"]
    waiting = [c for c in checks if c.status == "not judged"]
    verdict: Verdict
    if failing:
        verdict, reason = "roll back", "failing: " + " | ".join(c.line() for c in failing)
    elif waiting:
        verdict, reason = "wait", "waiting on: " + " | ".join(c.line() for c in waiting)
    else:
        verdict, reason = "promote", "every check passed: " + ", ".join(c.name for c in checks if c.status == "pass")
    return CanaryVerdict(verdict=verdict, reason=reason, canary_version=canary_version or _only(canary),
                         champion_version=_only(champion), canary_rows=len(canary), champion_rows=len(champion),
                         checks=checks)


def _only(arm: pd.DataFrame) -> str | None:
    versions = sorted(set(arm["model_version"].astype(str)))
    return ",".join(versions) or None


class CanaryRun(BaseModel):
    """One judgement of the running canary: since when, the verdict, and what was done about it."""

    model_config = ConfigDict(extra="forbid")

    since: datetime | None
    verdict: CanaryVerdict
    action: str


def run_canary(settings: MonitoringSettings, *, act: bool, actor: str) -> CanaryRun:
    """Judge the running canary on the log since it started; with ``act``, promote it (the previous
    production version archived) or roll it back (the canary ended, the version tagged rejected), the
    verdict's figures in the audit record; with ``act`` every verdict, a wait too, is recorded in the
    registry's ``<model> canary verdicts`` with its figures. InputError when no canary runs. The checks
    and the verdict go to Prometheus (job ``mlops_canary``)."""
    started = time.perf_counter()
    running = registry.canary(settings)
    if running is None:
        raise InputError(f"no canary of {settings.model_name} is running; start one with "
                         "`mlops model promote VERSION --canary PERCENT`")
    version = running[0]
    # Since this version's canary share was set: earlier rows are another canary's or another champion's.
    since = canary_started(settings, version)
    window = read_window(log_dir(settings), WindowSpec(start=since))
    verdict = judge_canary(window, read_labels(settings.monitoring_dir), settings,
                           positive=load_contract(settings.contract_path).decisions.positive, canary_version=version,
                           references=_references(settings, version, registry.alias_version(settings)),
                           failures=read_failures(failure_dir(settings), start=since))
    metrics.publish(metrics.canary_registry(verdict, time.perf_counter() - started), metrics.CANARY_JOB,
                    settings.monitoring_dir, settings.pushgateway_url)
    reason = f"canary analysis: {verdict.reason}"
    if not act:
        return CanaryRun(since=since, verdict=verdict, action="nothing done")
    if verdict.verdict == "wait":
        action = "nothing done"
    elif verdict.verdict == "promote":
        champion = registry.alias_version(settings)
        registry.promote(settings, version, expected=champion, actor=actor, reason=reason)
        action = f"{settings.serving_alias} {champion or 'none'} -> {version}, {champion or 'none'} archived"
    else:
        registry.rollback(settings, actor=actor, reason=reason)
        registry.tag_version(settings, version, {"decision": "reject", "decision_reason": reason})
        revise_decision(settings, version, "reject", reason)  # what `mlops model list` shows; the tags for the UI
        action = f"canary {version} ended and tagged rejected"
    record_verdict(registry.client(settings), settings, VerdictRecord(
        version=version, verdict=verdict.verdict, reason=reason, action=action, actor=actor, at=datetime.now(UTC),
        figures=verdict_figures(verdict)))
    return CanaryRun(since=since, verdict=verdict, action=action)


def _references(settings: MonitoringSettings, canary: str, champion: str | None) -> References | None:
    """Both versions' reference profiles, or None when either has none (it predates profiles)."""
    if champion is None:
        return None
    try:
        return (fetch_profile(settings, settings.model_name, canary),
                fetch_profile(settings, settings.model_name, champion))
    except NotFoundError:
        return None


def verdict_figures(verdict: CanaryVerdict) -> dict[str, float]:
    """The verdict's numbers as MLflow metric keys ("<check>/<figure>"; MLflow allows no colon)."""
    figures = {"canary rows": float(verdict.canary_rows), "champion rows": float(verdict.champion_rows)}
    for check in verdict.checks:
        named = {"canary": check.canary, "champion": check.champion} | check.figures
        figures |= {f"{check.name}/{name}": value for name, value in named.items() if value is not None}
    return {_METRIC_KEY.sub("_", key): value for key, value in figures.items()}
