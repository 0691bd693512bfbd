"""The drift job end to end on real stores: prediction log -> reference profile from the MLflow
registry -> verdict -> actions against an admin API on 127.0.0.1 -> history, report, metrics.

The admin server here stands in for the prediction service's admin routes, which are being
built in parallel; tests/e2e/test_closed_loop.py runs the same loop against the real service.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract
from mlops.prediction_log import PredictionLog, log_dir
from mlops.reference_profile import ReferenceProfile
from mlops.settings import Settings
from mlops_cli.app import app
from monitoring.actions import read_history
from monitoring.job import run_drift, running_retrainings
from monitoring.settings import MonitoringSettings
from monitoring.window import WindowSpec

if TYPE_CHECKING:
    from served_traffic import LogWriter, Registrar, Traffic

pytestmark = pytest.mark.integration

TOKEN = "s3cret-admin-token"
runner = CliRunner()


class AdminStandIn(BaseHTTPRequestHandler):
    calls: ClassVar[list[dict[str, str]]] = []
    token: ClassVar[str | None] = TOKEN  # None: open, as the service's admin API in dev mode without a token

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.token is not None and self.headers.get("Authorization") != f"Bearer {self.token}":
            self._answer(401, {"detail": "bad token"})
            return
        type(self).calls.append({"path": self.path, "reason": body["reason"],
                                 "authorization": self.headers.get("Authorization", "")})
        self._answer(200, {"alias": "fallback"})

    def _answer(self, status: int, body: dict[str, str]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def admin() -> Iterator[str]:
    AdminStandIn.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), AdminStandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def settings(tmp_path: Path, admin: str, tracking_uri: str, monkeypatch: pytest.MonkeyPatch) -> MonitoringSettings:
    values = {"MLOPS_HOME": str(tmp_path / "home"), "MLOPS_TRACKING_URI": tracking_uri, "MLOPS_SERVICE_URL": admin,
              "MLOPS_ADMIN_TOKEN": TOKEN, "MLOPS_DRIFT_COOLDOWN_S": "3600", "MLOPS_KFP_HOST": "http://127.0.0.1:9"}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return MonitoringSettings()


def test_no_drift_logs_and_exports_info(settings: MonitoringSettings, reference: ReferenceProfile, live: Traffic,
                                        write_log: LogWriter, register_profile: Registrar) -> None:
    version = register_profile(settings, reference)
    write_log(live("none"), PredictionLog(log_dir(settings)), version=version)
    record = run_drift(settings, WindowSpec(start=datetime.now(UTC) - timedelta(days=1)))
    assert (record.level, record.actions, record.model_versions) == ("INFO", ["log"], [version])
    assert not AdminStandIn.calls
    exported = (settings.monitoring_dir / "mlops_drift.prom").read_text()
    assert f'mlops_drift_level{{feature="amount",model_name="card-transactions",model_version="{version}"}} 0.0' \
        in exported
    assert "mlops_monitoring_job_last_success_timestamp_seconds" in exported
    assert Path(record.report_paths[0]).stat().st_size > 10_000
    assert read_history(settings.monitoring_dir) == [record]
    # The report went to MLflow, under a platform home's artifact root (never a stray ./mlruns).
    experiment = registry.client(settings).get_experiment_by_name(f"{settings.experiment}-monitoring")
    assert experiment is not None
    assert experiment.artifact_location.endswith("/home/mlartifacts")


def test_critical_drift_switches_to_fallback_retrains_once_and_respects_the_cooldown(
        settings: MonitoringSettings, reference: ReferenceProfile, live: Traffic, write_log: LogWriter,
        contract: DataContract, tmp_path: Path, register_profile: Registrar) -> None:
    version = register_profile(settings, reference)
    drifted = live("amount_inflation")
    write_log(drifted, PredictionLog(log_dir(settings)), version=version)
    labels = tmp_path / "labels.csv"
    drifted[[contract.id_column, contract.label_column]].to_csv(labels, index=False)
    assert runner.invoke(app, ["labels", "ingest", str(labels)]).exit_code == 0

    result = runner.invoke(app, ["drift", "run", "--since", "1d"])
    assert result.exit_code == 0, result.output
    first = read_history(settings.monitoring_dir)[-1]
    assert first.level == "CRITICAL"
    assert first.actions == ["fallback", "retrain"]
    assert "amount CRITICAL" in first.reason
    # The report opens with the features by severity; the CLI names the worst three.
    html = Path(first.report_paths[0]).read_text()
    summary = html[html.index("<section id='drift-summary'"):html.index("</section>")]
    assert html.index("<section id='drift-summary'") - html.index("<body") < 100
    levels = re.findall(r"font-weight:bold'>(INFO|WARNING|CRITICAL)<", summary)
    assert levels[0] == "CRITICAL"
    assert levels == sorted(levels, key=["CRITICAL", "WARNING", "INFO"].index)
    assert summary.count("<tr>") == len(levels) + 1
    assert len(first.worst) == 3
    assert all(w.startswith(f"v{version}/") and " CRITICAL score " in w for w in first.worst)
    assert f"worst features: {first.worst[0]}" in " ".join(result.output.split())
    assert first.scores[f"v{version}/amount"] >= 0.2
    assert [c["path"] for c in AdminStandIn.calls] == ["/admin/fallback"]
    assert "drift CRITICAL" in AdminStandIn.calls[0]["reason"]
    retrained = pd.read_parquet(str(first.retraining_data))
    assert list(retrained.columns) == [c.name for c in contract.columns]
    assert len(retrained) == len(drifted)
    # The retraining run went to MLOPS_KFP_HOST (nothing listens there): the pipeline CLI was started
    # on the window's data and reported the unreachable endpoint in its log.
    (started,) = [r for r in running_retrainings() if str(r.data) == first.retraining_data]
    assert started.process.wait(timeout=120) != 0
    assert "127.0.0.1:9" in Path(str(first.retraining_log)).read_text()

    second = run_drift(settings, WindowSpec(start=datetime.now(UTC) - timedelta(days=1)))
    assert second.level == "CRITICAL"
    assert second.actions[0].startswith("none: cool-down until")
    assert len(AdminStandIn.calls) == 1
    assert second.retraining_data is None
    history = runner.invoke(app, ["drift", "history"])
    assert [r.actions[0] for r in read_history(settings.monitoring_dir)] == ["fallback", second.actions[0]]
    assert "fallback, retrain" in history.output
    assert "cool-down" in history.output


def test_a_refused_fallback_is_recorded_and_exits_1(settings: Settings, reference: ReferenceProfile, live: Traffic,
                                                     write_log: LogWriter, register_profile: Registrar,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_ADMIN_TOKEN", "wrong")
    monkeypatch.setenv("MLOPS_DRIFT_RETRAIN", "false")
    version = register_profile(settings, reference)
    write_log(live("new_merchant_category"), PredictionLog(log_dir(settings)), version=version)
    result = runner.invoke(app, ["drift", "run"])
    assert result.exit_code == 1
    assert "answered 401" in result.output
    assert read_history(settings.monitoring_dir)[-1].action_errors[0].startswith("fallback:")


@pytest.mark.parametrize("dev_mode", [True, False])
def test_without_a_token_only_dev_mode_calls_the_fallback(
        settings: Settings, reference: ReferenceProfile, live: Traffic, write_log: LogWriter,
        register_profile: Registrar, monkeypatch: pytest.MonkeyPatch, dev_mode: bool) -> None:
    monkeypatch.delenv("MLOPS_ADMIN_TOKEN")
    monkeypatch.setenv("MLOPS_DEV_MODE", str(dev_mode).lower())
    monkeypatch.setenv("MLOPS_DRIFT_RETRAIN", "false")
    monkeypatch.setattr(AdminStandIn, "token", None)
    version = register_profile(settings, reference)
    write_log(live("new_merchant_category"), PredictionLog(log_dir(settings)), version=version)
    result = runner.invoke(app, ["drift", "run"])
    record = read_history(Settings().monitoring_dir)[-1]
    assert record.level == "CRITICAL"
    if dev_mode:
        assert result.exit_code == 0, result.output
        assert [(c["path"], c["authorization"]) for c in AdminStandIn.calls] == [("/admin/fallback", "")]
        assert record.action_errors == []
    else:
        assert result.exit_code == 1
        assert not AdminStandIn.calls
        assert record.action_errors[0].startswith("fallback: no admin token")


@pytest.mark.parametrize(("rows", "code", "message"), [
    (0, 5, "no predictions logged in the whole log"),
    (1, 6, "no model version served 30 predictions of the window (v1: 1)"),
])
def test_bad_windows_exit_with_their_code(
        settings: Settings, reference: ReferenceProfile, live: Traffic, write_log: LogWriter,
        register_profile: Registrar, rows: int, code: int, message: str) -> None:
    register_profile(settings, reference)
    write_log(live("none").iloc[:rows], PredictionLog(log_dir(settings)), version="1")
    result = runner.invoke(app, ["drift", "run"])
    assert result.exit_code == code, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_version_without_profile_exits_4(settings: Settings, live: Traffic, write_log: LogWriter) -> None:
    write_log(live("none").iloc[:100], PredictionLog(log_dir(settings)), version="99")
    result = runner.invoke(app, ["drift", "run", "--last", "50"])
    assert result.exit_code == 4, result.output
    assert "card-transactions version 99 is not registered" in " ".join(result.output.split())
    bad = runner.invoke(app, ["drift", "run", "--since", "yesterday"])
    assert bad.exit_code == 2
    assert "--since must be a duration" in bad.output


@pytest.mark.parametrize("bar", ["", "true"])
def test_drift_run_prints_its_own_lines_with_one_version_prefix_and_the_report_explains_its_levels(
        settings: MonitoringSettings, reference: ReferenceProfile, live: Traffic, write_log: LogWriter,
        register_profile: Registrar, monkeypatch: pytest.MonkeyPatch, bar: str) -> None:
    monkeypatch.setenv("MLOPS_DRIFT_RETRAIN", "false")
    monkeypatch.setenv("MLOPS_DEV_MODE", "true")
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    if bar:  # MLflow's own default, to show that the bar this test looks for is real
        monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", bar)
    version = register_profile(settings, reference)
    write_log(live("amount_inflation"), PredictionLog(log_dir(settings)), version=version)
    # A fresh process: the reference profile is downloaded from the registry (no cached copy yet).
    done = subprocess.run([sys.executable, "-m", "mlops_cli", "drift", "run", "--since", "1d"],
                          capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert ("Downloading artifacts" in output) == bool(bar)
    line = " ".join(done.stdout.split())
    assert f"predictions of card-transactions v{version}: " in line
    # Every feature the lines name carries the same 'v<version>/' prefix (never a bare '<version>/').
    named = re.findall(r"(\S*)/(?:amount|probability|confident_share|top_score_share|[a-z_]+) ", line)
    assert named
    assert set(named) == {f"v{version}"}
    record = read_history(settings.monitoring_dir)[-1]
    assert record.reason.startswith(f"v{version}/")
    html = Path(record.report_paths[0]).read_text()
    start = html.index("<section id='drift-summary'")
    top = html[start:html.index("<table", start)]
    assert "only when its shift is large" in top
    assert "and its test is significant" in top
    assert "Next: the CRITICAL features changed for real" in top


def test_evidently_draws_a_sample_of_a_large_window_and_the_levels_judge_every_row(
        settings: MonitoringSettings, reference: ReferenceProfile, live: Traffic, write_log: LogWriter,
        register_profile: Registrar, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past REPORT_MAX_ROWS (100,000; 1,000 here) Evidently's panels come from a seeded sample and the
    report says so; the verdict, the scores and the estimate still count the whole window."""
    from monitoring import job

    monkeypatch.setattr(job, "REPORT_MAX_ROWS", 1_000)
    version = register_profile(settings, reference)
    window = live("amount_inflation")
    write_log(window, PredictionLog(log_dir(settings)), version=version)
    record = run_drift(settings, WindowSpec(start=datetime.now(UTC) - timedelta(days=1)))
    assert record.rows == len(window) > 1_000
    assert record.level == "CRITICAL"
    assert record.estimates[0].estimate.rows == len(window)
    html = " ".join(Path(record.report_paths[0]).read_text().split())
    assert f"seeded sample of 1,000 of the window's {len(window):,} predictions" in html


def test_the_job_reads_text_in_arrow_buffers_with_the_same_values(
        settings: MonitoringSettings, live: Traffic, write_log: LogWriter) -> None:
    from monitoring.window import read_window

    write_log(live("none").head(300), PredictionLog(log_dir(settings)))
    objects = read_window(log_dir(settings), WindowSpec())
    arrow = read_window(log_dir(settings), WindowSpec(), arrow_strings=True)
    assert isinstance(arrow["country"].dtype, pd.ArrowDtype)
    assert isinstance(arrow["unknown_categories"].dtype, pd.ArrowDtype)
    assert arrow["probability"].dtype == objects["probability"].dtype == "float64"
    for column in ("event_id", "country", "model_version", "decision", "customer_id"):
        assert arrow[column].tolist() == objects[column].tolist()
    assert [list(v) for v in arrow["unknown_categories"]] == [list(v) for v in objects["unknown_categories"]]
