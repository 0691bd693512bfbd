"""The mlops CLI: real commands in-process; bad input is one clear line and exit code 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from mlops.contract import DataContract
from mlops_cli.app import app

runner = CliRunner()


pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cli_home")]


def test_generate_writes_parquet_and_csv(tmp_path: Path) -> None:
    for name in ("tx.parquet", "tx.csv"):
        out = tmp_path / name
        result = runner.invoke(app, ["data", "generate", "--out", str(out), "--rows", "500", "--seed", "3"])
        assert result.exit_code == 0, result.output
        frame = pd.read_parquet(out) if out.suffix == ".parquet" else pd.read_csv(out)
        assert len(frame) == 500
        assert "wrote 500 rows of card-transactions" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["data", "generate", "--out", "x.txt"], "--out must end in .parquet or .csv"),
        (["data", "generate", "--out", "x.csv", "--scenario", "meteor"], "unknown scenario 'meteor'"),
        (["data", "ingest", "/nonexistent/tx.csv"], "source not found: /nonexistent/tx.csv"),
        (["data", "ingest", "tx.json"], "cannot tell the format"),
        (["pipeline", "run", "tx.csv", "--runner", "argo"], "--runner must be one of kfp, inline, got 'argo'"),
    ],
)
def test_bad_input_exits_2_with_a_message(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_invalid_setting_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLOPS_TRACKING_HTTP_RETRIES", "lots")
    result = runner.invoke(app, ["data", "ingest", "tx.csv"])
    assert result.exit_code == 2
    assert "MLOPS_" in result.output


def test_ingest_prints_the_snapshot_hash(tmp_path: Path) -> None:
    out = tmp_path / "tx.csv"
    assert runner.invoke(app, ["data", "generate", "--out", str(out), "--rows", "300"]).exit_code == 0
    result = runner.invoke(app, ["data", "ingest", str(out)])
    assert result.exit_code == 0, result.output
    snapshots = list((tmp_path / "home" / "snapshots").iterdir())
    assert len(snapshots) == 1
    assert snapshots[0].name in result.output


def test_pipeline_compile_check_passes_on_committed_yaml() -> None:
    result = runner.invoke(app, ["pipeline", "compile", "--check"])
    assert result.exit_code == 0, result.output
    assert "is current" in result.output


def test_pipeline_run_refuses_a_missing_file_before_starting(tmp_path: Path) -> None:
    result = runner.invoke(app, ["pipeline", "run", "/nonexistent/tx.parquet"])
    assert result.exit_code == 2, result.output
    assert " ".join(result.output.split()) == "error: source not found: /nonexistent/tx.parquet"
    assert not (tmp_path / "home").exists()  # nothing started: no MLflow store, no kfp root, no log file


def test_pipeline_run_names_a_refused_tracking_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      contract: DataContract) -> None:
    source = tmp_path / "tx.csv"
    source.write_text(",".join(c.name for c in contract.columns) + "\n")  # the header passes; no row is read
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("MLOPS_TRACKING_URI", uri)
    result = runner.invoke(app, ["pipeline", "run", str(source)])
    assert result.exit_code == 1, result.output
    assert " ".join(result.output.split()) == f"error: cannot reach the MLflow tracking server at {uri}: " \
                                              "connection refused"
    assert "Traceback" not in result.output


def test_pipeline_run_preflights_the_tracking_store_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         contract: DataContract) -> None:
    import mlops.preflight
    import pipelines.orchestration.runner

    checked: list[str] = []
    real_check = mlops.preflight.check_tracking_server

    def counted(uri: str) -> None:
        checked.append(uri)
        real_check(uri)
    for module in (mlops.preflight, pipelines.orchestration.runner):
        monkeypatch.setattr(module, "check_tracking_server", counted)
    source = tmp_path / "tx.csv"
    source.write_text(",".join(c.name for c in contract.columns) + "\n")  # no rows: the run stops at a step
    result = runner.invoke(app, ["pipeline", "run", str(source), "--runner", "inline"])
    assert result.output.startswith("pipeline run "), result.output  # the header still comes first
    assert len(checked) == 1, checked
