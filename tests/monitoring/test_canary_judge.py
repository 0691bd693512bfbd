"""Canary analysis on a real prediction log: two arms written as the service writes them (the canary
takes a fifth of the customers), judged check by check into promote, roll back or wait; then
`mlops model canary status|judge` against a registry of their own, acting on the verdict."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract
from mlops.failure_log import FailureLog, FailureRecord, read_failures
from mlops.prediction_log import PAIRED_ROLE, PredictionLog, log_dir
from mlops.reference_profile import build_profile
from mlops.registry_audit import read_verdicts
from mlops_cli.app import app
from monitoring.canary import CanaryVerdict, References, judge_canary
from monitoring.labels import ID, LABEL, ingest_labels
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec, read_window

if TYPE_CHECKING:
    from served_traffic import LogWriter, Traffic

runner = CliRunner()

START = datetime(2026, 3, 1, tzinfo=UTC)


def _arms(frame: pd.DataFrame, contract: DataContract) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(canary, champion): a fifth of the customers on the canary, sticky as the service routes them."""
    on_canary = frame["customer_id"].map(lambda c: zlib.crc32(str(c).encode()) % 5 == 0)
    rng = np.random.default_rng(3)
    timed = frame.assign(latency_s=rng.gamma(4.0, 0.002, len(frame)))  # one latency profile for both arms
    return timed[on_canary].reset_index(drop=True), timed[~on_canary].reset_index(drop=True)


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
    canary, champion = _arms(window, contract)
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
    canary, champion = _arms(live("none"), contract)
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


def test_the_champions_scores_of_the_canarys_rows_pair_the_pr_auc_interval(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract) -> None:
    window = live("none")
    canary, champion = _arms(window, contract)
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
    canary, champion = _arms(live("none"), contract)
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
    canary, champion = _arms(live("none"), contract)
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
    canary, champion = _arms(live("none"), contract)
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


@pytest.mark.parametrize("slow", [1.0, 3.0])
def test_latency_p99_fails_only_past_its_ratio(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract, slow: float) -> None:
    canary, champion = _arms(live("none"), contract)
    verdict = _judge(tmp_path, write_log, canary.assign(latency_s=canary["latency_s"] * slow), champion, None)
    latency = _check(verdict, "latency p99")
    assert latency["status"] == ("fail" if slow > 1.5 else "pass")
    assert verdict.verdict == ("roll back" if slow > 1.5 else "wait")


def _serve(settings: MonitoringSettings, write_log: LogWriter, canary: pd.DataFrame, champion: pd.DataFrame,
           versions: tuple[str, str]) -> None:
    """Both arms logged after the canary started, as the service logs them."""
    log = PredictionLog(log_dir(settings))
    after_start = datetime.now(UTC) + timedelta(seconds=1)
    write_log(champion, log, version=versions[0], logged_at=after_start)
    write_log(canary, log, version=versions[1], logged_at=after_start, role="canary")
    log.close()


def test_canary_status_prints_one_line_per_check_and_changes_nothing(
        canary_settings: tuple[MonitoringSettings, str, str], live: Traffic, write_log: LogWriter,
        contract: DataContract) -> None:
    settings, champion, candidate = canary_settings
    canary, served = _arms(live("none"), contract)
    _serve(settings, write_log, canary, served, (champion, candidate))

    shown = runner.invoke(app, ["model", "canary", "status"])

    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert lines[0].startswith(f"canary v{candidate} ({len(canary):,} rows) vs champion v{champion}")
    assert [line.split(":")[0] for line in lines[1:6]] == [
        "error rate", "latency p99", "score distribution", "decision rate", "PR-AUC"]
    assert lines[5] == "PR-AUC: not judged; not judged yet: 0 labelled rows, needs 300"
    assert lines[6] == "verdict: wait"
    assert registry.canary(settings) == (candidate, 20.0)
    exported = (settings.monitoring_dir / "mlops_canary.prom").read_text()
    assert f'mlops_canary_verdict{{model_version="{candidate}"}} 0.0' in exported
    assert 'mlops_canary_check_status{check="PR-AUC"} 1.0' in exported
    assert 'mlops_canary_check_status{check="score distribution"} 0.0' in exported
    assert 'mlops_canary_check_status{check="error rate"} 0.0' in exported  # no failure logged: passes
    mean = f'mlops_canary_check_value{{arm="canary",check="score distribution",model_version="{candidate}"}}'
    assert float(exported.split(mean)[1].split()[0]) == pytest.approx(canary["probability"].mean())
    assert f'mlops_canary_window_rows{{arm="champion",model_version="{champion}"}} {float(len(served))}' in exported


def test_canary_commands_without_a_canary_exit_2_in_one_line_but_the_schedules_exits_0(
        canary_settings: tuple[MonitoringSettings, str, str]) -> None:
    settings, _, _ = canary_settings
    registry.rollback(settings, actor="test", reason="ended")

    for command in ("status", "judge"):
        shown = runner.invoke(app, ["model", "canary", command])
        assert shown.exit_code == 2
        assert len(shown.output.strip().splitlines()) == 1
        assert "no canary of card-transactions is running" in shown.output
    # The schedule's form: nothing to judge is not a failure.
    scheduled = runner.invoke(app, ["model", "canary", "judge", "--if-running"])
    assert scheduled.exit_code == 0
    assert scheduled.output.strip() == "no canary of card-transactions is running: nothing to judge"


def test_judge_rolls_a_shifted_canary_back_with_its_figures_audited(
        canary_settings: tuple[MonitoringSettings, str, str], live: Traffic, write_log: LogWriter,
        contract: DataContract) -> None:
    settings, champion, candidate = canary_settings
    canary, served = _arms(live("none"), contract)
    shifted = canary.assign(probability=np.clip(canary["probability"] * 2.0, 0.0, 1.0))
    _serve(settings, write_log, shifted, served, (champion, candidate))

    judged = runner.invoke(app, ["model", "canary", "judge"])

    assert judged.exit_code == 0, judged.output
    assert "verdict: roll back" in judged.output
    assert registry.canary(settings) is None
    assert registry.alias_version(settings) == champion  # production never changed
    ended = registry.history(settings, registry.CANARY_ALIAS)[-1]
    assert (ended.from_version, ended.to_version) == (candidate, None)
    assert ended.reason.startswith("canary analysis: failing: ")
    assert "score distribution: fail" in ended.reason
    assert "PSI " in ended.reason
    exported = (settings.monitoring_dir / "mlops_canary.prom").read_text()
    assert f'mlops_canary_verdict{{model_version="{candidate}"}} 2.0' in exported
    assert 'mlops_canary_check_status{check="score distribution"} 2.0' in exported
    tags = registry.client(settings).get_model_version(settings.model_name, candidate).tags
    assert tags["decision"] == "reject"
    assert tags["decision_reason"] == ended.reason


def test_judge_promotes_an_equal_canary_once_labels_arrive_and_archives_the_champion(
        tmp_path: Path, canary_settings: tuple[MonitoringSettings, str, str], live: Traffic, write_log: LogWriter,
        contract: DataContract) -> None:
    settings, champion, candidate = canary_settings
    window = live("none")
    canary, served = _arms(window, contract)
    _serve(settings, write_log, canary, served, (champion, candidate))

    waited = runner.invoke(app, ["model", "canary", "judge"])
    assert waited.exit_code == 0
    assert "verdict: wait" in waited.output
    assert "action: nothing done" in waited.output
    assert registry.canary(settings) == (candidate, 20.0)
    (audited,) = read_verdicts(registry.client(settings), settings)  # a wait moves nothing, and is audited
    assert (audited.version, audited.verdict, audited.action) == (candidate, "wait", "nothing done")
    assert audited.reason.startswith("canary analysis: waiting on: ")
    assert audited.figures["canary rows"] > 0
    assert audited.figures["score distribution/PSI"] >= 0

    labels = tmp_path / "labels.csv"
    window[[contract.id_column, contract.label_column]].to_csv(labels, index=False)
    ingest_labels(labels, contract, settings.monitoring_dir)
    judged = runner.invoke(app, ["model", "canary", "judge"])

    assert judged.exit_code == 0, judged.output
    assert "verdict: promote" in judged.output
    assert registry.alias_version(settings) == candidate
    assert registry.canary(settings) is None
    stage = registry.client(settings).get_model_version(settings.model_name, champion).current_stage
    assert stage == "Archived"
    moved = registry.history(settings, settings.serving_alias)[-1]
    assert (moved.from_version, moved.to_version) == (champion, candidate)
    assert moved.reason.startswith("canary analysis: every check passed")
    verdicts = read_verdicts(registry.client(settings), settings)
    assert [v.verdict for v in verdicts] == ["wait", "promote"]
    assert verdicts[-1].reason == moved.reason
    assert verdicts[-1].figures["PR-AUC/canary"] > 0
