"""Weekly retraining: The ingest step keeps only the training window (real MLflow
store on SQLite), an empty window stops the run as bad input, `mlops pipeline run` refuses a second
run while the lock is held, and the single-host schedule runs a command the CLI has."""

from __future__ import annotations

import configparser
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from infra.compose import command_problem
from infra.manifests import REPO_ROOT
from mlops import registry
from mlops.data.generator import generate_transactions
from mlops.errors import IngestError, PipelineError, RunLockedError
from mlops.run_lock import exclusive_pipeline_run
from mlops_cli.app import app
from pipelines.orchestration.context import StepContext
from pipelines.orchestration.progress import key_figure
from pipelines.orchestration.runner import run_pipeline
from pipelines.orchestration.tasks import ingest_task
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.integration

SYSTEMD_DIR = REPO_ROOT / "infra" / "systemd"
runner = CliRunner()


@pytest.fixture(scope="module")
def source(home: Path) -> Path:
    """Eight weeks of transactions from 2026-01-05 as a CSV."""
    path = home / "transactions.csv"
    generate_transactions(2_000, days=56, start=pd.Timestamp("2026-01-05", tz="UTC").to_pydatetime()).to_csv(
        path, index=False)
    return path


def test_ingest_keeps_the_window_and_reports_what_it_dropped(home: Path, source: Path) -> None:
    out = home / "windowed.parquet"
    ingested = ingest_task(StepContext.of(PipelineSettings(home=home)), source=str(source), snapshot=out,
                           run_name="windowed", since="2026-02-02", until="2026-02-16")
    run_id, sha256 = ingested.run_id, ingested.dataset_sha256
    kept = pd.read_parquet(out)
    times = kept["event_timestamp"]
    assert times.min() >= pd.Timestamp("2026-02-02", tz="UTC")
    assert times.max() < pd.Timestamp("2026-02-16", tz="UTC")
    everything = pd.read_csv(source)
    assert 0 < len(kept) < len(everything)
    run = registry.client(PipelineSettings(home=home)).get_run(run_id)
    params = run.data.params
    assert int(params["window_rows"]) == len(kept)
    assert int(params["rows_outside_window"]) == len(everything) - len(kept)
    assert int(params["dataset_rows"]) == len(everything)  # the snapshot itself stays whole
    assert params["window_since"] == "2026-02-02T00:00:00+00:00"
    assert key_figure("ingest", params, {}, None) == (
        f"{len(kept):,} rows in window, {len(everything) - len(kept):,} outside dropped, sha256 {sha256[:8]}…")


def test_without_a_window_ingest_keeps_every_row(home: Path, source: Path) -> None:
    out = home / "all.parquet"
    run_id = ingest_task(StepContext.of(PipelineSettings(home=home)), source=str(source), snapshot=out,
                         run_name="all").run_id
    assert len(pd.read_parquet(out)) == len(pd.read_csv(source))
    assert "window_rows" not in registry.client(PipelineSettings(home=home)).get_run(run_id).data.params


def test_an_empty_window_stops_the_run_at_ingest_as_bad_input(mlflow_home: Path, source: Path) -> None:
    with pytest.raises(PipelineError) as stopped:  # its own home: the module's must hold no run logs
        run_pipeline(str(source), PipelineSettings(home=mlflow_home), run_name="empty-window", runner="inline",
                     since="2025-01-01", until="2025-02-01")
    assert isinstance(stopped.value.__cause__, IngestError)
    failure = stopped.value
    assert failure.step == "ingest"
    assert failure.exit_code == 2
    assert failure.message.startswith("pipeline stopped at ingest: no rows in the training window")


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "2026-02-01", "--last-weeks", "2"], "give --since or --last-weeks, not both"),
    (["--since", "2026-03-01", "--until", "2026-02-01"], "the window is empty"),
    (["--until", "yesterday"], "--until must be an ISO 8601 time"),
])
def test_cli_refuses_a_bad_window_before_running(home: Path, source: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["pipeline", "run", str(source), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (home / "logs").exists()  # nothing ran


def test_a_second_run_exits_at_once_while_the_lock_is_held(tmp_path: Path, source: Path) -> None:
    env = {**os.environ, "MLOPS_HOME": str(tmp_path)}
    with exclusive_pipeline_run(PipelineSettings(home=tmp_path)):
        result = subprocess.run([str(Path(sys.executable).with_name("mlops")), "pipeline", "run", str(source),
                                 "--last-weeks", "4"], env=env, capture_output=True, text=True, timeout=10,
                                check=False)
    assert result.returncode == RunLockedError.exit_code == 75
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"another pipeline run (pid {os.getpid()}) is running on {tmp_path}" in lines[0]
    assert not (tmp_path / "logs").exists()


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string((SYSTEMD_DIR / name).read_text())
    return parser


def _mlops_argv(command: str) -> list[str]:
    argv = shlex.split(command)
    start = next(i for i, word in enumerate(argv) if word.endswith("bin/mlops"))
    return ["mlops", *argv[start + 1:]]


def test_systemd_timer_and_cron_run_the_same_existing_command_weekly() -> None:
    service, timer = _unit("mlops-retrain.service"), _unit("mlops-retrain.timer")
    assert timer["Timer"]["Unit"] == "mlops-retrain.service"
    assert timer["Timer"]["OnCalendar"] == "Mon *-*-* 03:00:00"
    assert timer["Install"]["WantedBy"] == "timers.target"
    assert service["Service"]["Type"] == "oneshot"
    assert service["Service"]["SuccessExitStatus"] == str(RunLockedError.exit_code)
    from_systemd = _mlops_argv(service["Service"]["ExecStart"].replace("${MLOPS_RETRAIN_SOURCE}", "SOURCE"))
    cron_lines = [line for line in (SYSTEMD_DIR / "mlops-retrain.cron").read_text().splitlines()
                  if line and not line.startswith("#") and "=" not in line.split()[0]]
    assert len(cron_lines) == 1
    schedule, command = cron_lines[0].split(maxsplit=5)[:5], cron_lines[0].split(maxsplit=5)[5]
    assert schedule == ["0", "3", "*", "*", "1"]  # Mondays 03:00, as the timer and `mlops pipeline schedule`
    from_cron = _mlops_argv(command.split(">>")[0].replace('"$MLOPS_RETRAIN_SOURCE"', "SOURCE"))
    assert from_systemd == from_cron == ["mlops", "pipeline", "run", "SOURCE", "--last-weeks", "4"]
    assert command_problem(from_systemd, REPO_ROOT) is None
    assert command_problem(["mlops", "pipeline", "run", "SOURCE", "--last-week", "4"], REPO_ROOT) is not None
