"""Estimated quality through the real jobs: a prediction log, profiles registered in MLflow, the drift
job (before labels) and the quality job with `mlops labels ingest`/`quality` (after them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops.contract import DataContract
from mlops.prediction_log import PredictionLog, log_dir
from mlops.reference_profile import ReferenceProfile
from mlops_cli.app import app
from monitoring.calibration_guard import read_checks
from monitoring.job import run_drift
from monitoring.quality_job import run_quality
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec

if TYPE_CHECKING:
    from served_traffic import LogWriter, Registrar, Traffic

pytestmark = pytest.mark.integration

runner = CliRunner()
THRESHOLD = 0.5  # write_log decides positive at 0.5


@pytest.fixture
def settings(tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch) -> MonitoringSettings:
    # Nothing listens on the service URL: a CRITICAL verdict's fallback is recorded as failed, not made.
    values = {"MLOPS_HOME": str(tmp_path / "home"), "MLOPS_TRACKING_URI": tracking_uri,
              "MLOPS_SERVICE_URL": "http://127.0.0.1:9", "MLOPS_DRIFT_RETRAIN": "false"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return MonitoringSettings()


def _day() -> WindowSpec:
    return WindowSpec(start=datetime.now(UTC) - timedelta(days=1))


def _one_day_start(rows: int) -> datetime:
    """Where ``rows`` predictions one second apart start so that they fall into one UTC day (one bucket of
    the quality job's ``1D``) and into the last day: just before now, or, in the minutes after midnight,
    just before midnight. Split across two days, each bucket is a part of the window whose interval
    was never claimed to hold (a run at 00:25 failed on one)."""
    now = datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    start = now - timedelta(seconds=rows + 60)
    return start if start >= midnight else midnight - timedelta(seconds=rows + 60)


@pytest.mark.parametrize("broken", [False, True])
def test_a_zeroed_feature_raises_the_estimated_level_before_any_label(
        settings: MonitoringSettings, reference: ReferenceProfile, live: Traffic, write_log: LogWriter,
        register_profile: Registrar, broken: bool) -> None:
    """Acceptance 1: the service sends one feature as 0 (the model breaks, the inputs barely move); the
    drift job's estimate falls below the reference's and raises a level, with no label stored."""
    from served_traffic import score

    version = register_profile(settings, reference.model_copy(update={"threshold": THRESHOLD}))
    window = live("none").copy()
    if broken:
        window["customer_txn_count_1h"] = 0
        window["probability"] = score(window)
    write_log(window, PredictionLog(log_dir(settings)), version=version)

    record = run_drift(settings, _day())
    (estimated,) = record.estimates
    assert (estimated.model_version, estimated.role, estimated.reliable) == (version, "champion", True)
    assert estimated.estimate.rows == len(window)
    assert estimated.reference is not None
    exported = (settings.monitoring_dir / "mlops_drift.prom").read_text()
    key = f'model_name="card-transactions",model_version="{version}",role="champion"'
    assert f'mlops_estimated_quality{{bound="high",metric="f1",{key}}}' in exported
    if not broken:
        assert estimated.level == "INFO"
        assert f"mlops_estimated_quality_level{{{key}}} 0.0" in exported
        return
    assert estimated.level in ("WARNING", "CRITICAL")
    assert (estimated.drop("f1") or 0) >= settings.estimate_drop_warning
    assert estimated.estimate.f1.high < estimated.reference.f1.estimate
    assert f"v{version}/champion estimated quality {estimated.level}: estimated f1" in record.reason
    assert f"mlops_estimated_quality_level{{{key}}} 0.0" not in exported
    html = Path(record.report_paths[0]).read_text()
    section = html[html.index("<section id='estimated-quality'"):]
    assert f"font-weight:bold'>{estimated.level}<" in section[:section.index("</section>")]
    shown = runner.invoke(app, ["drift", "run", "--since", "1d"])
    assert f"estimated quality v{version}/champion {estimated.level}: F1" in " ".join(shown.output.split())


def test_a_squashed_model_is_flagged_unreliable_once_labels_arrive(
        settings: MonitoringSettings, reference: ReferenceProfile, live: Traffic, write_log: LogWriter,
        register_profile: Registrar, contract: DataContract, tmp_path: Path) -> None:
    """Acceptance 2: v2 serves the same ranking and decisions as the calibrated v1, its scores squashed
    toward 0.5. Before labels its estimate alarms; once labels arrive its calibration check fails, so
    its estimate is marked unreliable and raises no level, while v1's stays trusted."""
    profile = reference.model_copy(update={"threshold": THRESHOLD})
    calibrated, squashed = register_profile(settings, profile), register_profile(settings, profile)
    window = live("none")
    log = PredictionLog(log_dir(settings))
    start = _one_day_start(len(window))
    write_log(window, log, version=calibrated, logged_at=start)
    write_log(window.assign(probability=0.5 + 0.4 * (window["probability"] - 0.5)), log, version=squashed,
              logged_at=start)
    before = {e.model_version: e for e in run_drift(settings, _day()).estimates}
    assert before[squashed].level != "INFO"
    assert before[calibrated].level == "INFO"

    # Labels drawn from v1's probabilities: v1 is calibrated by construction, v2 is not.
    drawn = np.random.default_rng(4).random(len(window)) < window["probability"].to_numpy()
    labels = tmp_path / "labels.csv"
    pd.DataFrame({contract.id_column: window[contract.id_column], contract.label_column: drawn.astype(int)}).to_csv(
        labels, index=False)
    assert runner.invoke(app, ["labels", "ingest", str(labels)]).exit_code == 0
    rows = run_quality(settings, WindowSpec(), "1D")
    assert any(r.unreliable.startswith("ECE ") for r in rows if r.model_version == squashed)
    assert not any(r.unreliable for r in rows if r.model_version == calibrated)
    for row in (r for r in rows if r.model_version == calibrated and r.estimate is not None):
        assert row.estimate is not None
        assert row.estimate.f1.holds(row.f1)
        assert row.estimate.precision.holds(row.precision)
    checks = read_checks(settings.monitoring_dir)
    assert checks[squashed].ece > settings.calibration_ece_limit > checks[calibrated].ece
    exported = (settings.monitoring_dir / "mlops_quality.prom").read_text()
    assert f'mlops_estimated_quality_gap{{metric="f1",model_version="{squashed}",role="champion"}}' in exported
    assert f'mlops_calibration_ece{{model_version="{calibrated}",role="champion"}}' in exported
    shown = runner.invoke(app, ["labels", "quality", "--window", "1D"])
    assert shown.exit_code == 0, shown.output
    printed = " ".join(shown.output.split())
    assert "realized vs estimated" in printed
    assert f"v{squashed}/champion: estimate unreliable: ECE " in printed

    after = {e.model_version: e for e in run_drift(settings, _day()).estimates}
    assert (after[squashed].level, after[squashed].reliable) == ("INFO", False)
    assert after[squashed].note.startswith(f"estimate unreliable: ECE {checks[squashed].ece:.3f} > 0.05")
    assert (after[calibrated].level, after[calibrated].reliable) == ("INFO", True)


def test_labelled_traffic_refits_the_map_the_next_estimate_reads_through(
        settings: MonitoringSettings, reference: ReferenceProfile, traffic: Traffic, live: Traffic,
        write_log: LogWriter, register_profile: Registrar, contract: DataContract, tmp_path: Path) -> None:
    """The version serves its scores 1.5 log-odds too low (0.5 served as 0.18), which its reference
    never saw, so read through the reference's map today's window expects far too few frauds. Three
    days ago's traffic gets its labels; the quality job's check refits the score map on them, and the
    next estimate of today's unlabelled window expects the frauds the true probabilities hold, and the
    recall they give (judged against the truth's expectation: one draw of labels would judge the draw)."""
    def served(probabilities: np.ndarray) -> np.ndarray:
        lowered: np.ndarray = 1 / (1 + np.exp(-(np.log(probabilities / (1 - probabilities)) - 1.5)))
        return lowered

    version = register_profile(settings, reference.model_copy(update={"threshold": THRESHOLD}))
    log = PredictionLog(log_dir(settings))
    earlier, today = traffic("none").iloc[: len(traffic("none")) // 2], live("none")
    true_earlier = np.clip(earlier["probability"].to_numpy(), 1e-6, 1 - 1e-6)
    write_log(earlier.assign(probability=served(true_earlier)), log, version=version,
              logged_at=datetime.now(UTC) - timedelta(days=3))
    true_today = np.clip(today["probability"].to_numpy(), 1e-6, 1 - 1e-6)
    write_log(today.assign(probability=served(true_today)), log, version=version)
    frauds = float(true_today.sum())
    recall = float(true_today[served(true_today) >= THRESHOLD].sum()) / frauds

    (before,) = run_drift(settings, _day()).estimates
    assert before.estimate.expected_positives < 0.6 * frauds
    assert before.estimate.recall.low > recall

    labels = tmp_path / "labels.csv"
    drawn = np.random.default_rng(8).random(len(earlier)) < true_earlier
    pd.DataFrame({contract.id_column: earlier[contract.id_column],
                  contract.label_column: drawn.astype(int)}).to_csv(labels, index=False)
    assert runner.invoke(app, ["labels", "ingest", str(labels)]).exit_code == 0
    run_quality(settings, WindowSpec(), "1D")
    check = read_checks(settings.monitoring_dir)[version]
    assert check.score_map is not None
    assert check.score_map.rows == len(earlier)

    (after,) = run_drift(settings, _day()).estimates
    assert abs(after.estimate.expected_positives - frauds) < 0.15 * frauds
    assert after.estimate.recall.holds(recall)
    assert after.reference is not None
    assert before.reference is not None
    assert after.reference.recall.estimate < before.reference.recall.estimate  # the same map reads both
