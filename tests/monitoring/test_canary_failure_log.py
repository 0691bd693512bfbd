"""`mlops model canary judge` and the failure log it reads: failures it cannot read stop it in one line
(exit 2, nothing acted on) instead of a traceback or a judgement without them; a torn last line does not.
The canary failed a quarter of its rows, so a judgement without the failure log would look healthier."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from typer.testing import CliRunner

from mlops import registry
from mlops.failure_log import FailureLog, FailureRecord, failure_dir
from mlops.prediction_log import PredictionLog, log_dir
from mlops_cli.app import app
from monitoring.settings import MonitoringSettings

if TYPE_CHECKING:
    from served_traffic import LogWriter, Traffic

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
