"""`mlops model canary status|judge` against a registry of their own: both arms logged as the service
logs them, the verdict printed, exported, audited and acted on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
from canary_arms import split_arms
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract
from mlops.prediction_log import PredictionLog, log_dir
from mlops.registry_audit import read_verdicts
from mlops_cli.app import app
from monitoring.labels import ingest_labels
from monitoring.settings import MonitoringSettings

if TYPE_CHECKING:
    from served_traffic import LogWriter, Traffic

pytestmark = pytest.mark.integration

runner = CliRunner()


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
    canary, served = split_arms(live("none"), contract)
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
    canary, served = split_arms(live("none"), contract)
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
    canary, served = split_arms(window, contract)
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
