"""End to end: the compiled pipeline through kfp.local on small data, then the service.

The first run (a model promoted) is the kfp.local run of the test run's one `mlops demo`
(tests/demo_home.py, shared with tests/e2e/test_demo.py), copied once per session and kept as a
template; every test starts from a fresh copy of that home, so the scenarios (the same data again
changes nothing, a worse model is registered but not promoted, corrupted data stops at validate
without creating a version) are independent: one promotion bug fails one test, in any order.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from demo_home import MAX_EPOCHS as DEMO_MAX_EPOCHS
from demo_home import ROWS as DEMO_ROWS
from demo_home import DemoRun, demo_copy

from feature_repo.store import materialize_online, publish_features
from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.errors import PipelineError
from mlops.feature_store import offline_features
from mlops.inference import OnnxModel
from mlops.prediction_log import log_dir, read_predictions
from pipelines.demo import free_port, replay_start, start_service, wait_ready
from pipelines.demo_replay import request_body
from pipelines.orchestration.environment import settings_env
from pipelines.orchestration.progress import StepReport
from pipelines.orchestration.records import IngestRecord
from pipelines.orchestration.run_records import RunRecords
from pipelines.orchestration.runner import PipelineOutcome, read_outcome, run_log_path, run_pipeline
from pipelines.settings import PipelineSettings
from pipelines.steps.preprocess import time_split

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]
PARITY_TOLERANCE = 1e-6


@dataclass
class Platform:
    settings: PipelineSettings
    contract: DataContract
    data: pd.DataFrame
    source: Path
    first: PipelineOutcome
    first_steps: list[StepReport]
    first_wall_s: float  # the demo's whole time, which holds the first run's


@dataclass(frozen=True)
class FirstRun:
    """The home after the first run, and a pristine copy of it (the template)."""

    home: Path
    template: Path
    data: pd.DataFrame
    source: Path
    first: PipelineOutcome
    first_steps: list[StepReport]
    first_wall_s: float


# MLflow's db and Feast's registry hold absolute paths under home, so each copy is restored to the
# same path; NullPool makes every MLflow call open the restored db rather than a pooled handle.
ISOLATED_ENV = {"MLFLOW_SQLALCHEMYSTORE_POOLCLASS": "NullPool"}


# The demo's output: where its run logs its steps (the run's name), each finished step, its total time.
RUN_LOG = re.compile(r"step logs in (\S+)\.log\)")
STEP_LINE = re.compile(r"^ {6}(\w+) +(\d+\.\d) s(?:  (.*))?$", re.MULTILINE)
DEMO_TOOK = re.compile(r"Demo took (\d+) s")


@pytest.fixture(scope="session")
def first_run(demo_run: DemoRun, tmp_path_factory: pytest.TempPathFactory) -> FirstRun:
    """The first run is the pipeline run of the test run's one `mlops demo` (tests/demo_home.py: through
    kfp.local, on 6,000 rows, at most 15 epochs): its home copied, then brought back to what the pipeline
    left, before the demo's service and replay (a fresh online store with the offline features the run
    published, no prediction log, no model cache). Its step reports are the demo's printed step lines."""
    root = tmp_path_factory.mktemp("platform")
    home = demo_copy(demo_run, root / "home")
    output = demo_run.stdout
    logged = RUN_LOG.search(output)
    took = DEMO_TOOK.search(output)
    assert logged, output[-3000:]
    assert took, output[-3000:]
    run_name = Path(logged.group(1)).name
    steps = [StepReport(step, figure != "FAILED", float(seconds), "" if figure == "FAILED" else figure)
             for step, seconds, figure in STEP_LINE.findall(output)]
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**ISOLATED_ENV, "MLOPS_HOME": str(home), "MLOPS_MAX_EPOCHS": str(DEMO_MAX_EPOCHS)}.items():
            patch.setenv(key, value)
        settings = PipelineSettings()
        first = read_outcome(settings, run_name)
        ingested = RunRecords.of(settings, run_name).record("ingest", IngestRecord)
        assert ingested is not None
        for left_by_the_demo in (settings.feast_dir, home / "predictions", home / "serving"):
            shutil.rmtree(left_by_the_demo, ignore_errors=True)
        publish_features(settings.snapshots_dir / ingested.dataset_sha256 / "data.parquet",
                         load_contract(settings.contract_path), settings)  # what the run's preprocess published
    source = next((home / "demo").glob("*.parquet"))
    template = root / "template"
    shutil.copytree(home, template)
    # The demo's whole time (generation, the pipeline, the service and its replay): the run's wall time is within it.
    return FirstRun(home, template, pd.read_parquet(source), source, first, steps, float(took.group(1)))


@pytest.fixture
def platform(first_run: FirstRun) -> Iterator[Platform]:
    """A fresh copy of the first run's home, at the path the first run used."""
    shutil.rmtree(first_run.home)
    shutil.copytree(first_run.template, first_run.home)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**ISOLATED_ENV, "MLOPS_HOME": str(first_run.home),
                           "MLOPS_MAX_EPOCHS": str(DEMO_MAX_EPOCHS)}.items():
            patch.setenv(key, value)
        settings = PipelineSettings()
        yield Platform(settings, load_contract(settings.contract_path), first_run.data, first_run.source,
                       first_run.first, first_run.first_steps, first_run.first_wall_s)


def _run_metrics(settings: PipelineSettings, run_id: str) -> dict[str, float]:
    return dict(registry.client(settings).get_run(run_id).data.metrics)


def _history(settings: PipelineSettings, run_id: str, key: str) -> list[float]:
    history = registry.client(settings).get_metric_history(run_id, key)
    return [m.value for m in sorted(history, key=lambda m: m.step)]


def test_first_run_registers_and_promotes(platform: Platform) -> None:
    assert platform.first.decision == "promote"
    assert platform.first.version == "1"
    assert registry.alias_version(platform.settings) == "1"
    tags = registry.client(platform.settings).get_model_version(platform.settings.model_name, "1").tags
    assert tags["decision"] == "promote"
    assert tags["deployed_at"]


def test_first_run_reports_each_step_and_keeps_its_logs_in_a_file(platform: Platform) -> None:
    steps = platform.first_steps
    assert [s.step for s in steps] == ["ingest", "validate", "preprocess", "train", "export", "evaluate", "deploy"]
    assert all(s.succeeded and s.seconds > 0 and s.figure for s in steps), [s.line for s in steps]
    # Each step is timed from its own start to its end: one after another, within the run's wall time.
    assert sum(s.seconds for s in steps) <= platform.first_wall_s
    assert steps[0].figure.startswith(f"{DEMO_ROWS:,} rows, sha256 ")
    assert steps[4].figure.startswith("ONNX parity vs torch")
    assert steps[5].figure.endswith("-> promote")
    log = run_log_path(platform.settings, platform.first.run_name).read_text()
    assert "Executing task 'train'" in log
    assert "validation passed" in log  # the steps' own log lines
    assert "\x1b[" not in log


def test_first_run_logs_provenance_metrics_and_pictures(platform: Platform) -> None:
    client = registry.client(platform.settings)
    run = client.get_run(platform.first.run_id)
    params = run.data.params
    assert len(params["dataset_sha256"]) == 64
    assert params["seed"] == "42"
    assert params["git_commit"]
    epochs = int(params["epochs_run"])
    assert len(_history(platform.settings, platform.first.run_id, "val_pr_auc")) == epochs
    assert float(run.data.metrics["export_max_abs_diff"]) <= 1e-5
    logged = {a.path for folder in ("evaluation", "validation") for a in client.list_artifacts(run.info.run_id, folder)}
    assert {"evaluation/pr_curve.png", "evaluation/confusion_matrix.png", "evaluation/report.json",
            "validation/validation.html", "validation/validation.json"} <= logged


def test_replayed_test_split_matches_offline_features_and_scores_without_skew(
        platform: Platform, tmp_path: Path) -> None:
    """Materialize just before the test split, then replay it in time order through a running
    service, each request after the previous answer: every transaction's served features equal its
    offline point-in-time features, its probability equals offline ONNX scoring, and the skew
    check over the prediction log finds no difference."""
    settings, contract = platform.settings, platform.contract
    test = time_split(platform.data, contract)["test"]
    materialize_online(settings, contract, replay_start(platform.data, contract))
    port = free_port(settings.host)
    process = start_service(settings, port, tmp_path / "serving.log")
    base_url = f"http://{settings.host}:{port}"
    try:
        wait_ready(base_url, process, tmp_path / "serving.log")
        with httpx.Client(base_url=base_url, timeout=30) as http:
            for _, row in test.iterrows():
                answer = http.post("/predict", json=request_body(row, contract))
                assert answer.status_code == 200, answer.text
            burst_start = test[contract.timestamp_column].max() + pd.Timedelta(hours=1)
            card = {**request_body(test.iloc[0], contract), "customer_id": "C-burst"}
            burst = [http.post("/predict", json={
                **card, "transaction_id": f"BURST-{n}",
                "event_timestamp": (burst_start + pd.Timedelta(seconds=30 * n)).isoformat()}) for n in range(5)]
            assert [b.status_code for b in burst] == [200] * 5
    finally:
        process.terminate()
        process.wait(timeout=30)
    logged = {r.event_id: r for r in read_predictions(log_dir(settings))}
    offline = offline_features(settings, contract, platform.data)
    offline = offline.set_index(contract.id_column).loc[test[contract.id_column]]
    served = pd.DataFrame([logged[i].features for i in offline.index], index=offline.index)[contract.feature_names]
    assert len(served) == len(test)
    feature_diff = (served - offline[contract.feature_names]).abs().to_numpy().max()
    assert feature_diff <= 1e-9
    model = OnnxModel(registry.download_serving_model(settings, tmp_path / "model").onnx_path)
    offline_probability = model.predict_proba(offline.reset_index())
    served_probability = np.asarray([logged[i].probability for i in offline.index])
    np.testing.assert_allclose(served_probability, offline_probability, rtol=0, atol=PARITY_TOLERANCE)
    counts = [logged[f"BURST-{n}"].features["customer_txn_count_1h"] for n in range(5)]
    assert all(a < b for a, b in itertools.pairwise(counts)), counts
    print(f"replayed {len(test)} transactions: max feature difference {feature_diff:.2g}")
    _skew_check_finds_no_skew(platform)


def _skew_check_finds_no_skew(platform: Platform) -> None:
    """`mlops features skew` over the replay's prediction log (it needs the replay above)."""
    env = {**os.environ, **settings_env(platform.settings)}
    result = subprocess.run([sys.executable, "-m", "mlops_cli", "features", "skew", "--sample", "300"],
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0.00% differ by more than 1e-09" in result.stdout
    # The burst lies after the offline data: counted, not compared.
    assert "newer than the offline store" in result.stdout


def _online_store_bytes(settings: PipelineSettings) -> bytes:
    return (settings.feast_dir / "online.db").read_bytes()


def test_rerun_on_same_data_gives_identical_metrics_and_keeps_production(platform: Platform) -> None:
    """The rerun goes through the inline runner (the same steps in this process) and the first run
    went through kfp.local: identical metrics and histories show both runners give the same outcome."""
    online_before = _online_store_bytes(platform.settings)
    steps: list[StepReport] = []
    again = run_pipeline(str(platform.source), platform.settings, run_name="again", runner="inline",
                         on_step=steps.append)
    assert [(s.step, s.succeeded) for s in steps] == [(step, True) for step in (
        "ingest", "validate", "preprocess", "train", "export", "evaluate")]  # no deploy after a reject
    assert steps[5].figure.endswith("-> reject")
    first_metrics = _run_metrics(platform.settings, platform.first.run_id)
    again_metrics = _run_metrics(platform.settings, again.run_id)
    test_keys = [k for k in first_metrics if k.startswith("test_")]
    assert test_keys
    assert {k: again_metrics[k] for k in test_keys} == {k: first_metrics[k] for k in test_keys}
    for key in ("train_loss", "val_pr_auc"):
        assert _history(platform.settings, again.run_id, key) == _history(platform.settings,
                                                                          platform.first.run_id, key)
    # Equal F1 does not beat production by the margin: registered, not promoted.
    assert again.decision == "reject"
    assert registry.alias_version(platform.settings) == platform.first.version
    # A rejected run leaves what production serves untouched, to the byte.
    assert _online_store_bytes(platform.settings) == online_before


def test_worse_model_is_registered_but_not_promoted(platform: Platform) -> None:
    shuffled = platform.data.copy()
    label = platform.contract.label_column
    shuffled[label] = np.random.default_rng(0).permutation(shuffled[label].to_numpy())
    source = platform.source.with_name("shuffled.parquet")
    shuffled.to_parquet(source, index=False)
    # The decision is the subject, not the runner: the steps run in this process (the inline runner).
    worse = run_pipeline(str(source), platform.settings, run_name="shuffled", runner="inline")
    assert worse.decision == "reject"
    assert worse.version is not None
    assert registry.alias_version(platform.settings) == platform.first.version
    tags = registry.client(platform.settings).get_model_version(platform.settings.model_name, worse.version).tags
    assert tags["decision"] == "reject"
    assert "ranks no better than a constant score" in tags["decision_reason"]
    # Both models are scored on this run's (shuffled) test split, so the production F1 is low too;
    # what matters is that the candidate does not clear production + margin, and is a worse model.
    assert float(tags["candidate_f1"]) < float(tags["production_f1"]) + platform.settings.promotion_margin
    first_pr_auc = _run_metrics(platform.settings, platform.first.run_id)["test_pr_auc"]
    assert float(tags["candidate_pr_auc"]) < first_pr_auc / 2
    assert "deployed_at" not in tags


def _reused_ids_and_duplicate_rows(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    frame.loc[frame.index[10:13], "transaction_id"] = frame["transaction_id"].iloc[9]
    return pd.concat([frame, frame.iloc[100:105]], ignore_index=True)


def test_corrupted_data_stops_at_validate(platform: Platform) -> None:
    """One corruption end to end, two distinct findings from one file; each other kind (missing
    column, nulls, out-of-range, unknown category, empty file) is a unit case in test_validate.py."""
    source = platform.source.with_name("corrupt-reused-ids-and-duplicate-rows.csv")
    _reused_ids_and_duplicate_rows(platform.data).to_csv(source, index=False)
    versions_before = registry.list_versions(platform.settings)
    steps: list[StepReport] = []
    with pytest.raises(PipelineError) as failure:
        run_pipeline(str(source), platform.settings, run_name="corrupt", on_step=steps.append)
    assert failure.value.step == "validate"
    assert [(s.step, s.succeeded) for s in steps] == [("ingest", True), ("validate", False)]
    for finding in ("column transaction_id: expected no id shared by rows that differ, observed ",
                    "rows: expected no two rows identical, observed "):
        assert finding in failure.value.message
    assert failure.value.message.endswith("validation.html)")
    assert registry.list_versions(platform.settings) == versions_before
    assert registry.alias_version(platform.settings) == platform.first.version
