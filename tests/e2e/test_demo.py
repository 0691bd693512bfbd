"""`mlops demo` as `make demo` runs it: the real CLI, a real uvicorn service in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_demo_runs_end_to_end_and_stops_the_service(tmp_path: Path) -> None:
    # Few rows and epochs: this test is about the demo's steps and the service, not the model's quality
    # (3,000 rows still put four fraud and four legit samples in the test split).
    env = {**os.environ, "MLOPS_HOME": str(tmp_path / "home"), "MLOPS_MAX_EPOCHS": "3"}
    result = subprocess.run([sys.executable, "-m", "mlops.cli", "demo", "--rows", "3000"], env=env,
                            capture_output=True, text=True, timeout=840, check=False)
    output = result.stdout
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "pipeline done: version 1 promoted; production is version 1" in output
    ready = re.search(r"service ready at (http://127\.0\.0\.1:\d+), serving fraud-detector version 1", output)
    assert ready, output[-3000:]
    # Eight sample rows, each answered by the served version.
    answers = re.findall(r"│\s+(fraud|legit)\s+│\s+([0-9.]+)\s+│\s+(fraud|legit)\s+│\s+1\s+│", output)
    assert len(answers) == 8, output[-3000:]
    assert {actual for actual, _, _ in answers} == {"fraud", "legit"}
    assert all(0.0 <= float(probability) <= 1.0 for _, probability, _ in answers)
    assert "service stopped" in output
    assert "mlflow ui --backend-store-uri sqlite:///" in output
    assert "make serve" in output
    # The service is gone: nothing listens on its port any more.
    port = int(ready.group(1).rsplit(":", 1)[1])
    probe = subprocess.run([sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                           capture_output=True, check=False)
    assert probe.returncode != 0
