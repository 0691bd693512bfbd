"""Checks before a pipeline starts: missing local files, unknown formats, an MLflow server that is down."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from mlops.errors import IngestError, PipelineError
from mlops.preflight import check_source, check_tracking_server

pytestmark = pytest.mark.unit


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_check_source_refuses_missing_local_files_and_unknown_formats(tmp_path: Path) -> None:
    present = tmp_path / "tx.csv"
    present.write_text("a\n1\n")
    check_source(str(present))
    check_source(present.as_uri())
    check_source("https://example.org/tx.csv")  # remote: only ingest can tell
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    for missing in (str(tmp_path / "nope.csv"), (tmp_path / "nope.csv").as_uri(), str(folder)):
        with pytest.raises(IngestError, match="source not found") as info:
            check_source(missing)
        assert info.value.exit_code == 2
    with pytest.raises(IngestError, match="cannot tell the format"):
        check_source(str(tmp_path / "tx.json"))


def test_refused_tracking_server_is_named() -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(PipelineError) as info:
        check_tracking_server(uri)
    assert info.value.message == f"cannot reach the MLflow tracking server at {uri}: connection refused"


def test_listening_tracking_server_and_local_stores_pass(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_tracking_server(f"http://127.0.0.1:{server.getsockname()[1]}/")
    check_tracking_server(f"sqlite:///{tmp_path}/mlflow.db")
