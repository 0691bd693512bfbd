"""Canary analysis on a real prediction log: two arms written as the service writes them (the canary
takes a fifth of the customers), judged check by check into promote, roll back or wait. The
commands that act on a verdict: test_canary_cli.py."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
from canary_arms import split_arms
from typer.testing import CliRunner

from mlops.contract import DataContract
from mlops.failure_log import FailureLog, FailureRecord, read_failures
from mlops.prediction_log import PAIRED_ROLE, PredictionLog
from mlops.reference_profile import build_profile
from monitoring.canary import CanaryVerdict, References, judge_canary
from monitoring.labels import ID, LABEL
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec, read_window

if TYPE_CHECKING:
    from served_traffic import LogWriter, Traffic

pytestmark = pytest.mark.integration

runner = CliRunner()

START = datetime(2026, 3, 1, tzinfo=UTC)


def _judge(tmp_path: Path, write_log: LogWriter, canary: pd.DataFrame, champion: pd.DataFrame,
           labels: pd.DataFrame | None, references: References | None = None,
           failed: dict[str, int] | None = None, paired: pd.DataFrame | None = None) -> CanaryVerdict:
    """The arms judged with ``failed`` rows per role in the failure log (none by default); ``paired``:
    the champion's scores of the canary's rows, logged as the service logs them."""
    log = PredictionLog(tmp_path / "predictions")
    write_log(champion, log, version="1", logged_at=START)
    write_log(canary, log, version="2", logged_at=START, role="canary")
    if paired is not None:
        write_log(paired, log, version="1", logged_at=START, role=PAIRED_ROLE)
    log.close()
    failures = FailureLog(tmp_path / "failures")
    failures.write([FailureRecord(logged_at=START, model_name="card-transactions", model_version=version, role=role,
                                  rows=rows, error="RuntimeException: indices element out of data bounds")
                    for role, version in (("canary", "2"), ("champion", "1")) if (rows := (failed or {}).get(role))])
    window = read_window(tmp_path / "predictions", WindowSpec())
    return judge_canary(window, labels, MonitoringSettings(home=tmp_path), positive="fraud", canary_version="2",
                        references=references, failures=read_failures(tmp_path / "failures"))


def _labels(frame: pd.DataFrame, contract: DataContract) -> pd.DataFrame:
    return pd.DataFrame({ID: frame[contract.id_column].astype(str), LABEL: frame[contract.label_column]})


def _check(verdict: CanaryVerdict, name: str) -> dict[str, object]:
    return next(c for c in verdict.checks if c.name == name).model_dump()


def test_the_same_model_on_both_arms_waits_below_the_minimum_then_promotes(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    window = live("none")
    canary, champion = split_arms(window, contract)
    assert len(canary) >= 700

    early = _judge(tmp_path / "early", write_log, canary.iloc[:150], champion.iloc[:800], None)
    assert early.verdict == "wait"
    assert _check(early, "score distribution")["note"] == "not judged yet: 150 rows, needs 500"
    assert _check(early, "decision rate")["note"] == "not judged yet: 150 rows, needs 500"
    assert _check(early, "latency p99")["note"] == "not judged yet: 150 timed rows, needs 200"
    assert _check(early, "PR-AUC")["status"] == "not judged"
    assert _check(early, "error rate")["note"] == "not judged yet: 150 rows, needs 500"

    unlabelled = _judge(tmp_path / "unlabelled", write_log, canary, champion, None)
    assert unlabelled.verdict == "wait"  # every other check passes, PR-AUC waits for labels
    assert [c.status for c in unlabelled.checks] == ["pass", "pass", "pass", "pass", "not judged"]

    labelled = _judge(tmp_path / "labelled", write_log, canary, champion, _labels(window, contract))
    assert labelled.verdict == "promote", labelled.reason
    pr_auc = _check(labelled, "PR-AUC")
    assert pr_auc["status"] == "pass"
    figures = pr_auc["figures"]
    assert isinstance(figures, dict)
    assert figures["99% low"] < figures["difference"] < figures["99% high"]
    assert _check(labelled, "error rate")["status"] == "pass"


def test_a_canary_failing_rows_the_champion_does_not_rolls_back_on_the_error_rate(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    canary, champion = split_arms(live("none"), contract)
    three_percent = round(len(canary) * 0.03)

    failing = _judge(tmp_path / "failing", write_log, canary, champion, None, failed={"canary": three_percent})
    both = _judge(tmp_path / "both", write_log, canary, champion, None,
                  failed={"canary": three_percent, "champion": round(len(champion) * 0.03)})
    slightly = _judge(tmp_path / "slightly", write_log, canary, champion, None,
                      failed={"canary": round(len(canary) * 0.005)})

    check = _check(failing, "error rate")
    assert check["status"] == "fail"
    assert check["canary"] == pytest.approx(three_percent / (len(canary) + three_percent))
    assert check["champion"] == 0.0
    figures = check["figures"]
    assert isinstance(figures, dict)
    assert figures["canary failed rows"] == three_percent
    assert figures["p"] < 0.01
    assert failing.verdict == "roll back"
    assert failing.reason.startswith("failing: error rate: fail")
    assert _check(both, "error rate")["status"] == "pass"  # the same rate on both arms is not the canary's fault
    assert _check(slightly, "error rate")["status"] == "pass"  # half a percent: within the 1 % margin


def test_shifted_canary_scores_roll_back_naming_the_score_check_and_its_psi(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    canary, champion = split_arms(live("none"), contract)
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
    canary, champion = split_arms(live("none"), contract)
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
    canary, champion = split_arms(window, contract)
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


def test_the_champions_scores_of_the_canarys_rows_pair_the_pr_auc_interval(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    window = live("none")
    canary, champion = split_arms(window, contract)
    labels = _labels(window, contract)
    rng = np.random.default_rng(5)
    blind = canary.assign(probability=rng.permutation(canary["probability"].to_numpy()))

    unpaired = _judge(tmp_path / "unpaired", write_log, canary, champion, labels)
    same = _judge(tmp_path / "same", write_log, canary, champion, labels, paired=canary)
    worse = _judge(tmp_path / "worse", write_log, blind, champion, labels, paired=canary)

    alone, together = _check(unpaired, "PR-AUC"), _check(same, "PR-AUC")
    assert str(alone["note"]).startswith("unpaired")
    assert together["note"] == f"paired: both models' scores of the canary's {len(canary)} labelled rows"
    figures, paired_figures = alone["figures"], together["figures"]
    assert isinstance(figures, dict)
    assert isinstance(paired_figures, dict)
    # One model on both sides of the same rows: every resample's difference is 0; unpaired it is noise.
    assert paired_figures["99% low"] == paired_figures["99% high"] == paired_figures["difference"] == 0.0
    assert figures["99% high"] - figures["99% low"] > 0.05
    assert paired_figures["paired rows"] == len(canary)
    assert same.verdict == "promote"
    blind_check = _check(worse, "PR-AUC")
    assert blind_check["status"] == "fail"
    assert str(blind_check["note"]).startswith("paired")
    assert worse.verdict == "roll back"


def _sharper(probability: pd.Series | np.ndarray) -> np.ndarray:
    """Another model's scores: the same ranking, twice the log-odds (a better-trained model is sharper)."""
    p = np.clip(np.asarray(probability, dtype="float64"), 1e-6, 1 - 1e-6)
    return np.asarray(1 / (1 + ((1 - p) / p) ** 2))


def _references(traffic: Traffic, contract: DataContract, canary_scores: Callable[[np.ndarray], np.ndarray],
                ) -> References:
    """(canary, champion) profiles of the reference half, as evaluate builds them, threshold 0.5 (the log's)."""
    half = traffic("none").iloc[: len(traffic("none")) // 2]
    scores = half["probability"].to_numpy()
    return (build_profile(half, contract, canary_scores(scores), threshold=0.5),
            build_profile(half, contract, scores, threshold=0.5))


def test_a_sharper_canary_scoring_live_as_it_scored_offline_is_judged_against_its_own_reference(
        tmp_path: Path, traffic: Traffic, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    canary, champion = split_arms(live("none"), contract)
    sharper = canary.assign(probability=_sharper(canary["probability"]))

    direct = _judge(tmp_path / "direct", write_log, sharper, champion, None)
    judged = _judge(tmp_path / "judged", write_log, sharper, champion, None, _references(traffic, contract, _sharper))

    # Compared with each other, two models differ: the old check rolled a sharper model back for it.
    assert _check(direct, "score distribution")["status"] == "fail"
    scores = _check(judged, "score distribution")
    assert scores["status"] == "pass"
    figures = scores["figures"]
    assert isinstance(figures, dict)
    assert figures["PSI"] < 0.05
    assert figures["champion PSI"] < 0.05
    assert _check(judged, "decision rate")["status"] == "pass"
    assert judged.verdict == "wait"  # PR-AUC waits for labels


def test_a_canary_whose_live_scores_left_its_reference_rolls_back_with_both_arms_psi(
        tmp_path: Path, traffic: Traffic, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    canary, champion = split_arms(live("none"), contract)
    # Evaluate saw the sharper model; live, an input broken online leaves it half as sure (its scores
    # come out as the champion's): against each other the arms would look alike.
    broken = canary

    verdict = _judge(tmp_path, write_log, broken, champion, None, _references(traffic, contract, _sharper))

    scores = _check(verdict, "score distribution")
    assert scores["status"] == "fail"
    figures = scores["figures"]
    assert isinstance(figures, dict)
    assert figures["PSI"] - figures["champion PSI"] > 0.1
    assert verdict.verdict == "roll back"
    direct = _judge(tmp_path / "direct", write_log, broken, champion, None)
    assert _check(direct, "score distribution")["status"] == "pass"
    assert f"PSI {figures['PSI']:.4g}, champion PSI {figures['champion PSI']:.4g}" in verdict.reason


def test_a_canary_flagging_far_fewer_than_its_reference_did_rolls_back_on_the_decision_rate(
        tmp_path: Path, traffic: Traffic, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    canary, champion = split_arms(live("none"), contract)
    # Only its top scores fall under the threshold: the scores' bins hardly move, its decisions do.
    muted = canary.assign(probability=np.minimum(canary["probability"], 0.49))

    verdict = _judge(tmp_path, write_log, muted, champion, None, _references(traffic, contract, lambda p: p))

    decisions = _check(verdict, "decision rate")
    assert decisions["status"] == "fail"
    figures = decisions["figures"]
    assert isinstance(figures, dict)
    assert figures["ratio"] < 1 / 1.5
    assert figures["canary reference"] == figures["champion reference"] > 0
    assert verdict.reason.startswith("failing: decision rate: fail")


@pytest.mark.parametrize(("scale", "slow", "fails"), [
    (1.0, 1.0, False),
    (1.0, 3.0, True),  # p99 about 20 ms against 60 ms: past the ratio and the floor
    (0.1, 2.0, False),  # about 2 ms against 4 ms: past the ratio, within the 5 ms floor (a busy node's noise)
])
def test_latency_p99_fails_only_past_its_ratio_and_its_floor(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract, scale: float, slow: float,
        fails: bool) -> None:
    canary, champion = split_arms(live("none"), contract)
    champion = champion.assign(latency_s=champion["latency_s"] * scale)
    verdict = _judge(tmp_path, write_log, canary.assign(latency_s=canary["latency_s"] * scale * slow), champion,
                     None)
    latency = _check(verdict, "latency p99")
    figures = latency["figures"]
    assert isinstance(figures, dict)
    assert figures["ratio"] > 1.5 or slow == 1.0
    assert latency["status"] == ("fail" if fails else "pass")
    assert verdict.verdict == ("roll back" if fails else "wait")
