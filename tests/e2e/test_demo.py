"""`mlops demo` as `make demo` runs it: the real CLI, a real uvicorn service in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from demo_home import DemoRun, demo_copy

from mlops import registry
from mlops.inference import OnnxModel
from mlops.prediction_log import log_dir, read_predictions
from mlops.settings import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def demo(demo_run: DemoRun, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run's one `mlops demo` (tests/demo_home.py: 6,000 rows, at most 15 epochs): this module's copy
    of its home, and its printed output."""
    return demo_copy(demo_run, tmp_path_factory.mktemp("demo") / "home"), demo_run.stdout


SAMPLE_ROW = re.compile(r"│\s+(fraud|legit)\s+│\s+([0-9.]+)\s+│\s+(fraud|legit)\s+│\s+"
                        r"(caught fraud|missed fraud|false alarm|legit)\s+│\s+1\s+│")
SUMMARY = re.compile(r"on the whole test split \(([\d,]+) rows\) the service caught (\d+) of (\d+) fraud"
                     r"(?: \(\d+%\))? and raised (\d+) false alarms among ([\d,]+) legit")


def test_demo_shows_the_model_at_work_and_stops_the_service(demo: tuple[Path, str]) -> None:
    home, output = demo
    assert "[2/4] direct promotion (demo); pipelines default to a 10 % canary" in output
    assert "pipeline done: version 1 promoted; production is version 1" in output
    ready = re.search(r"service ready at (http://127\.0\.0\.1:\d+), serving card-transactions version 1", output)
    assert ready, output[-3000:]
    settings = Settings(home=home)
    model = OnnxModel(registry.download_serving_model(settings, home.parent / "served").onnx_path)
    assert f"fraud when probability >= threshold {model.threshold:.3f}" in output
    samples = SAMPLE_ROW.findall(output)
    # Each sample's outcome follows from its label and decision; the table holds a caught fraud.
    expected = {("fraud", "fraud"): "caught fraud", ("fraud", "legit"): "missed fraud",
                ("legit", "fraud"): "false alarm", ("legit", "legit"): "legit"}
    assert [kind for _, _, _, kind in samples] == [expected[(a, d)] for a, _, d, _ in samples]
    assert "caught fraud" in {kind for *_, kind in samples}, output[-3000:]
    # The whole test split went through the service: the summary counts what the log holds.
    logged = read_predictions(log_dir(settings))
    summary = SUMMARY.search(output)
    assert summary, output[-3000:]
    total, caught, frauds, alarms, legit = (int(g.replace(",", "")) for g in summary.groups())
    assert total == len(logged) == frauds + legit
    assert (caught, alarms) == (0, 0) or 0 < caught <= frauds
    # Each answer is what the served model makes of the logged inputs and features, decided at its threshold.
    rescored = model.predict_proba([{**r.inputs, **r.features} for r in logged])
    assert [r.probability for r in logged] == pytest.approx(rescored.tolist(), abs=1e-6)
    assert [r.decision for r in logged] == ["fraud" if r.probability >= model.threshold else "legit" for r in logged]
    printed = {(f"{float(p):.4f}", d) for _, p, d, _ in samples}
    assert printed <= {(f"{r.probability:.4f}", r.decision) for r in logged}
    assert "service stopped" in output
    assert "mlflow ui --port 5000 --backend-store-uri sqlite:///" in output
    # The link opens the experiment's runs list, where the pipeline's run is named after its outcome.
    experiment = registry.ensure_experiment(settings)
    assert f"(then open http://127.0.0.1:5000/{registry.runs_list_link(experiment)})" in " ".join(output.split())
    runs = registry.client(settings).search_runs(
        [experiment], filter_string=f"attributes.run_name = '{settings.pipeline_name} v1 promote'")
    assert len(runs) == 1
    assert runs[0].data.tags["decision"] == "promote"
    assert {"test_f1", "test_pr_auc"} <= set(runs[0].data.metrics)
    assert "make serve" in output
    # The service is gone: nothing listens on its port any more.
    port = int(ready.group(1).rsplit(":", 1)[1])
    probe = subprocess.run([sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)"],
                           capture_output=True, check=False)
    assert probe.returncode != 0


def test_the_training_run_lists_its_splits_and_the_version_carries_a_model_card(demo: tuple[Path, str]) -> None:
    home, _ = demo
    settings = Settings(home=home)
    client = registry.client(settings)
    served = client.get_model_version(settings.model_name, "1")
    run = client.get_run(str(served.run_id))
    snapshot = run.data.params["dataset_sha256"]
    assert run.inputs is not None
    contexts = {next(t.value for t in i.tags if t.key == "mlflow.data.context"): i.dataset
                for i in run.inputs.dataset_inputs}
    assert set(contexts) == {"training", "validation", "testing"}
    assert {d.digest for d in contexts.values()} == {snapshot[:36]}
    for context, split in (("training", "train"), ("validation", "validation"), ("testing", "test")):
        assert json.loads(str(contexts[context].profile))["num_rows"] == int(run.data.params[f"{split}_rows"])
    card = str(served.description)
    metrics = run.data.metrics
    for label, key in (("F1", "test_f1"), ("PR-AUC", "test_pr_auc"), ("threshold", "test_threshold")):
        assert f"| {label} | {metrics[key]:.4f} |" in card
    assert run.data.tags["decision_reason"] in card
    assert snapshot in card


def test_predictions_show_lists_what_the_service_answered(demo: tuple[Path, str]) -> None:
    home, output = demo
    shown = subprocess.run([sys.executable, "-m", "mlops_cli", "predictions", "show", "--format", "json",
                            "--last", "0"], env={**os.environ, "MLOPS_HOME": str(home)},
                           capture_output=True, text=True, timeout=120, check=True)
    answers = json.loads(shown.stdout)
    logged = read_predictions(log_dir(Settings(home=home)))
    assert [(a["event_id"], a["probability"], a["decision"], a["model_version"], a["role"]) for a in answers] == [
        (r.event_id, r.probability, r.decision, r.model_version, r.role) for r in logged]
    assert all(a[name] == r.features[name] for a, r in zip(answers, logged, strict=True) for name in r.features)
    assert all(a["latency_ms"] == pytest.approx(r.latency_s * 1000) for a, r in zip(answers, logged, strict=True)
               if r.latency_s is not None)
    # The answers the demo printed, as the service returned them, are among those shown.
    shown_answers = {(a["event_id"], f"{a['probability']:.4f}", a["decision"]) for a in answers}
    printed = re.findall(r"│ (T\S+)\s+│.*?│\s+([0-9.]+)\s+│\s+(fraud|legit)\s+│\s+[a-z ]+│\s+1\s+│", output)
    assert printed
    assert set(printed) <= shown_answers
