"""Canary analysis on a real prediction log: two arms written as the service writes them (the canary
takes a fifth of the customers), judged check by check into promote, roll back or wait."""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

from mlops.contract import DataContract
from mlops.prediction_log import PredictionLog
from monitoring.canary import CanaryVerdict, judge_canary
from monitoring.labels import ID, LABEL
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec, read_window

if TYPE_CHECKING:
    from served_traffic import LogWriter, Traffic

START = datetime(2026, 3, 1, tzinfo=UTC)


def _arms(frame: pd.DataFrame, contract: DataContract) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(canary, champion): a fifth of the customers on the canary, sticky as the service routes them."""
    on_canary = frame["customer_id"].map(lambda c: zlib.crc32(str(c).encode()) % 5 == 0)
    rng = np.random.default_rng(3)
    timed = frame.assign(latency_s=rng.gamma(4.0, 0.002, len(frame)))  # one latency profile for both arms
    return timed[on_canary].reset_index(drop=True), timed[~on_canary].reset_index(drop=True)


def _judge(tmp_path: Path, write_log: LogWriter, canary: pd.DataFrame, champion: pd.DataFrame,
           labels: pd.DataFrame | None) -> CanaryVerdict:
    log = PredictionLog(tmp_path / "predictions")
    write_log(champion, log, version="1", logged_at=START)
    write_log(canary, log, version="2", logged_at=START, role="canary")
    log.close()
    window = read_window(tmp_path / "predictions", WindowSpec())
    return judge_canary(window, labels, MonitoringSettings(home=tmp_path), positive="fraud", canary_version="2")


def _labels(frame: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    return pd.DataFrame({ID: frame[contract.id_column].astype(str), LABEL: frame[contract.label_column]})


def _check(verdict: CanaryVerdict, name: str) -> dict[str, object]:
    return next(c for c in verdict.checks if c.name == name).model_dump()


def test_the_same_model_on_both_arms_waits_below_the_minimum_then_promotes(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    window = live("none")
    canary, champion = _arms(window, contract)
    assert len(canary) >= 700

    early = _judge(tmp_path / "early", write_log, canary.iloc[:150], champion.iloc[:800], None)
    assert early.verdict == "wait"
    assert _check(early, "score distribution")["note"] == "not judged yet: 150 rows, needs 500"
    assert _check(early, "decision rate")["note"] == "not judged yet: 150 rows, needs 500"
    assert _check(early, "latency p99")["note"] == "not judged yet: 150 timed rows, needs 200"
    assert _check(early, "PR-AUC")["status"] == "not judged"

    unlabelled = _judge(tmp_path / "unlabelled", write_log, canary, champion, None)
    assert unlabelled.verdict == "wait"  # every other check passes, PR-AUC waits for labels
    assert [c.status for c in unlabelled.checks] == ["skipped", "pass", "pass", "pass", "not judged"]

    labelled = _judge(tmp_path / "labelled", write_log, canary, champion, _labels(window, contract))
    assert labelled.verdict == "promote", labelled.reason
    pr_auc = _check(labelled, "PR-AUC")
    assert pr_auc["status"] == "pass"
    figures = pr_auc["figures"]
    assert isinstance(figures, dict)
    assert figures["99% low"] < figures["difference"] < figures["99% high"]
    assert _check(labelled, "error rate")["status"] == "skipped"  # failed requests are not logged


def test_shifted_canary_scores_roll_back_naming_the_score_check_and_its_psi(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    canary, champion = _arms(live("none"), contract)
    shifted = canary.assign(probability=np.clip(canary["probability"] * 2.0, 0.0, 1.0))

    verdict = _judge(tmp_path, write_log, shifted, champion, None)

    assert verdict.verdict == "roll back"
    scores = _check(verdict, "score distribution")
    assert scores["status"] == "fail"
    figures = scores["figures"]
    assert isinstance(figures, dict)
    assert figures["PSI"] > 0.1
    assert figures["KS p"] < 0.01
    assert "score distribution: fail" in verdict.reason
    assert f"PSI {figures['PSI']:.4g}" in verdict.reason


def test_scores_half_again_as_high_roll_back_on_the_decision_rate(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    canary, champion = _arms(live("none"), contract)
    shifted = canary.assign(probability=np.clip(canary["probability"] * 1.5, 0.0, 1.0))

    verdict = _judge(tmp_path, write_log, shifted, champion, None)

    # Too small a shift of mostly tiny scores for the PSI, but it flags twice as many transactions.
    assert _check(verdict, "score distribution")["status"] == "pass"
    decisions = _check(verdict, "decision rate")
    assert decisions["status"] == "fail"
    figures = decisions["figures"]
    assert isinstance(figures, dict)
    assert figures["ratio"] > 1.5
    assert verdict.verdict == "roll back"
    assert verdict.reason.startswith("failing: decision rate: fail")


def test_a_much_worse_canary_rolls_back_on_pr_auc_with_its_interval_once_labels_arrive(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    window = live("none")
    canary, champion = _arms(window, contract)
    # Its scores shuffled among its own rows: the same distribution (the score check passes), no signal.
    rng = np.random.default_rng(5)
    blind = canary.assign(probability=rng.permutation(canary["probability"].to_numpy()))

    before = _judge(tmp_path / "before", write_log, blind, champion, None)
    after = _judge(tmp_path / "after", write_log, blind, champion, _labels(window, contract))

    assert before.verdict == "wait"
    assert after.verdict == "roll back"
    assert _check(after, "score distribution")["status"] == "pass"
    pr_auc = _check(after, "PR-AUC")
    assert pr_auc["status"] == "fail"
    figures = pr_auc["figures"]
    assert isinstance(figures, dict)
    assert figures["99% high"] < -0.02
    assert pr_auc["canary"] < pr_auc["champion"]  # type: ignore[operator]
    assert after.reason.startswith("failing: PR-AUC: fail")
    assert f"99% high {figures['99% high']:.4g}" in after.reason


@pytest.mark.parametrize("slow", [1.0, 3.0])
def test_latency_p99_fails_only_past_its_ratio(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract, slow: float) -> None:
    canary, champion = _arms(live("none"), contract)
    verdict = _judge(tmp_path, write_log, canary.assign(latency_s=canary["latency_s"] * slow), champion, None)
    latency = _check(verdict, "latency p99")
    assert latency["status"] == ("fail" if slow > 1.5 else "pass")
    assert verdict.verdict == ("roll back" if slow > 1.5 else "wait")
