"""`mlops demo` as `make demo` runs it: the real CLI, a real uvicorn service in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlops import registry
from mlops.inference import OnnxModel
from mlops.prediction_log import log_dir, read_predictions
from mlops.settings import Settings

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
    # Each printed answer is what the service logged; the served model scores the logged inputs and
    # features to that probability, and the decision is that probability against the model's threshold.
    settings = Settings(home=tmp_path / "home")
    model = OnnxModel(registry.download_serving_model(settings, tmp_path / "served").onnx_path)
    logged = read_predictions(log_dir(settings))
    assert len(logged) == 8
    rescored = model.predict_proba([{**r.inputs, **r.features} for r in logged])
    assert [r.probability for r in logged] == pytest.approx(rescored.tolist(), abs=1e-6)
    assert [r.decision for r in logged] == ["fraud" if r.probability >= model.threshold else "legit" for r in logged]
    assert sorted((f"{r.probability:.4f}", r.decision) for r in logged) == sorted((p, d) for _, p, d in answers)
    assert "service stopped" in output
    assert "mlflow ui --backend-store-uri sqlite:///" in output
    assert "make serve" in output
    # The service is gone: nothing listens on its port any more.
    port = int(ready.group(1).rsplit(":", 1)[1])
    probe = subprocess.run([sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                           capture_output=True, check=False)
    assert probe.returncode != 0
