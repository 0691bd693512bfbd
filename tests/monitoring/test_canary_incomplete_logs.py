"""The canary judge on incomplete logs. The failure log: failures it cannot read stop
`mlops model canary judge` in one line (exit 2, nothing acted on) instead of a traceback or a judgement
without them (the canary failed a quarter of its rows: without them it would look healthier); a torn
last line does not. The paired scores: the champion's scores of only some canary rows (the service
dropped the rest when its shadow scorer fell behind) pair just those rows, or none below the minimum."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract
from mlops.failure_log import FailureLog, FailureRecord, failure_dir
from mlops.prediction_log import PAIRED_ROLE, PredictionLog, log_dir
from mlops_cli.app import app
from monitoring.canary import judge_canary
from monitoring.labels import ID, LABEL
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec, read_window

if TYPE_CHECKING:
    from served_traffic import LogWriter, Traffic

pytestmark = pytest.mark.integration

runner = CliRunner()
CANARY_ROWS = 900


def _serve_with_failures(settings: MonitoringSettings, live: Traffic, write_log: LogWriter,
                         versions: tuple[str, str]) -> Path:
    """Both arms logged after the canary started, the canary's failures beside them; the day's folder."""
    window, after_start = live("none"), datetime.now(UTC) + timedelta(seconds=1)
    log = PredictionLog(log_dir(settings))
    write_log(window.iloc[CANARY_ROWS:], log, version=versions[0], logged_at=after_start)
    write_log(window.iloc[:CANARY_ROWS], log, version=versions[1], logged_at=after_start, role="canary")
    log.close()
    FailureLog(failure_dir(settings)).write([FailureRecord(
        logged_at=after_start, model_name=settings.model_name, model_version=versions[1], role="canary",
        rows=CANARY_ROWS // 3, error="RuntimeException: indices element out of data bounds")])
    [day] = failure_dir(settings).iterdir()
    return day


@pytest.mark.parametrize("breakage", ["a folder named *.jsonl", "a whole line not UTF-8"])
def test_judge_stops_in_one_line_on_a_failure_log_it_cannot_read(
        canary_settings: tuple[MonitoringSettings, str, str], live: Traffic, write_log: LogWriter,
        breakage: str) -> None:
    settings, champion, candidate = canary_settings
    broken = _serve_with_failures(settings, live, write_log, (champion, candidate)) / "other-replica.jsonl"
    if breakage == "a folder named *.jsonl":
        broken.mkdir()
    else:
        broken.write_bytes(b'{"logged_at": "2026-03-01T00:00:00Z", "error": "\xff"}\n')

    judged = runner.invoke(app, ["model", "canary", "judge"])

    assert judged.exit_code == 2, judged.output
    assert isinstance(judged.exception, SystemExit)  # the CLI's own exit, not an escaped OSError/UnicodeDecodeError
    [line] = judged.output.strip().splitlines()
    assert line.startswith(f"error: cannot read the failure log {broken}")
    assert registry.canary(settings) == (candidate, 20.0)  # nothing acted on
    assert registry.alias_version(settings) == champion


def test_judge_reads_past_a_torn_last_line_and_rolls_the_failing_canary_back(
        canary_settings: tuple[MonitoringSettings, str, str], live: Traffic, write_log: LogWriter) -> None:
    settings, champion, candidate = canary_settings
    day = _serve_with_failures(settings, live, write_log, (champion, candidate))
    (day / "crashed-replica.jsonl").write_bytes('{"logged_at": "2026-03-01T00:00:00Z", "error": "û'.encode()[:-1])

    judged = runner.invoke(app, ["model", "canary", "judge"])

    assert judged.exit_code == 0, judged.output
    assert "verdict: roll back" in judged.output
    assert "error rate: fail" in judged.output
    assert registry.canary(settings) is None


@pytest.mark.parametrize("share", [0.6, 0.05])
def test_missing_paired_scores_leave_their_rows_out_of_the_pairs(
        tmp_path: Path, live: Traffic, write_log: LogWriter, contract: DataContract, share: float) -> None:
    window = live("none")
    canary, champion = window.iloc[:CANARY_ROWS], window.iloc[CANARY_ROWS:]
    paired = canary.iloc[:int(CANARY_ROWS * share)]  # the champion's scores (one graph: the canary's) of these only
    log = PredictionLog(tmp_path / "predictions")
    write_log(champion, log, version="1")
    write_log(canary, log, version="2", role="canary")
    write_log(paired, log, version="1", role=PAIRED_ROLE)
    log.close()
    labels = pd.DataFrame({ID: window[contract.id_column].astype(str), LABEL: window[contract.label_column]})
    settings = MonitoringSettings(home=tmp_path)

    verdict = judge_canary(read_window(tmp_path / "predictions", WindowSpec()), labels, settings,
                           positive="fraud", canary_version="2")

    [pr_auc] = [c for c in verdict.checks if c.name == "PR-AUC"]
    assert (verdict.canary_rows, verdict.champion_rows) == (CANARY_ROWS, len(champion))  # paired rows are no arm
    if len(paired) >= settings.canary_min_labelled:
        of = f"{len(paired)} of the canary's {CANARY_ROWS}"
        assert pr_auc.note == f"paired: both models' scores of {of} labelled rows"
        assert pr_auc.figures["paired rows"] == len(paired)
        assert pr_auc.figures["difference"] == pr_auc.figures["99% low"] == pr_auc.figures["99% high"] == 0.0
    else:
        assert pr_auc.note.startswith("unpaired: too few of the canary's rows have the champion's score")
        assert "paired rows" not in pr_auc.figures
