"""Each model gate fails for the right reason and passes otherwise, on one
real home (MLflow on SQLite, snapshots, Feast, a served model): invalid data fails the data gate,
training with another seed fails reproducibility, a model trained on shuffled labels fails
performance, an injected slow-down of the real service fails latency."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from slow_service import serving_in_thread, slow_app

from benchmarks.serving_side_by_side import free_port
from ci_gates.__main__ import main
from ci_gates.data import data_gate
from ci_gates.latency import latency_gate, read_baseline, refresh_baseline
from ci_gates.performance import performance_gate
from ci_gates.reproducibility import check_reproducibility
from ci_gates.runs import TRAINED, newest_run
from ci_gates.settings import GateSettings
from feature_repo.store import materialize_online, publish_features
from mlops import registry
from mlops.contract import load_contract
from mlops.data.generator import generate_transactions
from pipelines.orchestration.context import StepContext
from pipelines.orchestration.tasks import ingest_task
from pipelines.settings import PipelineSettings
from pipelines.splits import split_paths
from pipelines.training.command import recorded_inputs, train_and_export
from serving.settings import ServingSettings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
ENV = {"MLOPS_MAX_EPOCHS": "3", "MLOPS_PATIENCE": "10", "MLOPS_DEVICE": "cpu", "MLOPS_SEED": "3",
       "MLOPS_BATCH_SIZE": "256", "MLOPS_GATE_MIN_F1": "0.5"}


@dataclass(frozen=True)
class GateHome:
    settings: GateSettings
    champion: str  # trained on the real labels, holds the production alias
    shuffled: str  # trained on shuffled labels, the newest version
    good_run: str  # pipeline run that ingested valid data
    bad_run: str  # the newest pipeline run, which ingested invalid data


def _register(settings: PipelineSettings, data_dir: Path, out: Path) -> str:
    report = train_and_export(split_paths(data_dir), out, str(out / "checkpoints"), settings)
    assert report is not None
    return registry.register_version(settings, report.model_uri, report.run_id, {"source": "tests/ci_gates"})


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[GateHome]:
    path = tmp_path_factory.mktemp("gates-home")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {**ENV, "MLOPS_HOME": str(path)}.items():
            patch.setenv(key, value)
        settings = GateSettings()
        contract = load_contract(settings.contract_path)
        raw = generate_transactions(1_500, seed=5)
        raw.to_csv(path / "good.csv", index=False)
        context = StepContext.of(settings)
        ingested = path / "ingested"
        good_run = ingest_task(context, source=str(path / "good.csv"), snapshot=ingested / "good.parquet").run_id
        bad = raw.copy()
        bad.loc[:9, "amount"] = -5.0  # the contract's minimum is 0.01
        bad.loc[10:59, "channel"] = "carrier-pigeon"  # not one of its channels
        bad.to_csv(path / "bad.csv", index=False)
        bad_run = ingest_task(context, source=str(path / "bad.csv"), snapshot=ingested / "bad.parquet").run_id

        champion = _register(settings, data_dir, path / "champion")
        registry.promote(settings, champion)
        shuffled_dir = path / "shuffled-data"
        shuffled_dir.mkdir()
        for name in ("train", "validation", "test"):
            frame = pd.read_parquet(data_dir / f"{name}.parquet")
            if name != "test":  # what it learns from and picks its threshold on; scored on the real labels
                frame["is_fraud"] = np.random.default_rng(0).permutation(frame["is_fraud"].to_numpy())
            frame.to_parquet(shuffled_dir / f"{name}.parquet", index=False)
        shuffled = _register(settings, shuffled_dir, path / "shuffled")

        publish_features(raw, contract, settings)  # the service reads its features from the online store
        materialize_online(settings, contract, raw[contract.timestamp_column].max().to_pydatetime())
        yield GateHome(settings, champion, shuffled, good_run, bad_run)
    mlflow.set_tracking_uri(None)  # type: ignore[arg-type]  # None = unset, the environment decides again
    mlflow.set_registry_uri(None)  # type: ignore[arg-type]


def test_data_gate_fails_on_the_newest_snapshot_naming_what_broke_and_passes_valid_data(home: GateHome) -> None:
    bad = data_gate(home.settings)
    assert bad.status == "FAIL"
    assert home.bad_run[:12] in bad.checked
    assert "expect_column_values_to_be_between(column=amount)" in bad.reason
    assert "expect_column_values_to_be_in_set(column=channel)" in bad.reason
    assert "validation.html" in bad.reason
    good = data_gate(home.settings, home.good_run)
    assert good.status == "PASS", good.line()
    assert "1,500 rows" in good.checked
    assert ", 0 failed" in good.checked


def test_performance_gate_fails_a_model_trained_on_shuffled_labels_and_passes_a_better_one(home: GateHome) -> None:
    worse = performance_gate(home.settings)  # the newest version: shuffled labels, against the production model
    assert worse.status == "FAIL"
    assert f"candidate v{home.shuffled}" in worse.checked
    assert "below the floor 0.5000" in worse.reason
    assert f"below champion v{home.champion}'s" in worse.reason
    without_floor = performance_gate(home.settings.model_copy(update={"gate_min_f1": 0.0}))
    assert without_floor.status == "FAIL"
    assert "floor" not in without_floor.reason  # only the champion stops it now
    assert f"below champion v{home.champion}'s" in without_floor.reason

    registry.promote(home.settings, home.shuffled)  # the worse model in production, the better one a candidate
    try:
        better = performance_gate(home.settings, home.champion)
    finally:
        registry.promote(home.settings, home.champion)
    assert better.status == "PASS", better.line()
    assert f"candidate v{home.champion}" in better.checked
    assert f"champion v{home.shuffled} (production)" in better.checked


def test_performance_gate_fails_closed_when_the_registry_cannot_answer(
        home: GateHome, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    dead = tmp_path / "dead-link"
    dead.symlink_to(tmp_path / "nowhere")
    monkeypatch.setenv("MLOPS_TRACKING_URI", f"sqlite:///{dead}/mlflow.db")
    assert main(["performance"]) == 1
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("performance  FAIL could not check: no tracking store at ")
    assert str(dead) in line


def test_reproducibility_gate_matches_runs_of_one_seed_and_fails_another(home: GateHome, tmp_path: Path) -> None:
    # The gate's inputs (the newest training run's logged splits and settings), trained three times:
    # twice as the gate does, once with the seed changed.
    run = newest_run(home.settings, TRAINED)
    _, params, paths = recorded_inputs(home.settings, run.info.run_id, tmp_path / "data")
    assert params is not None  # an mlp run
    other_seed = params.model_copy(update={"seed": params.seed + 1})
    outcome = check_reproducibility(paths, [params, params, other_seed], home.settings,
                                    origin=f"run {run.info.run_id[:12]}", workdir=tmp_path)
    assert outcome.status == "FAIL"
    assert "seeds 3, 3, 4" in outcome.checked
    assert outcome.reason.startswith("run 3 (seed 4) differs from run 1 in ")
    assert "ONNX sha256" in outcome.reason
    assert "run 2" not in outcome.reason  # the same seed reproduced every metric and the ONNX file
    same = check_reproducibility(paths, [params, params], home.settings, origin=f"run {run.info.run_id[:12]}",
                                 workdir=tmp_path / "same-seed")
    assert same.status == "PASS", same.line()


def test_latency_gate_fails_an_injected_slow_down_and_passes_the_same_service(home: GateHome, tmp_path: Path) -> None:
    delay = tmp_path / "delay-ms"
    delay.write_text("600")  # dominates the service's own few ms, so the passing comparison is not noise
    baseline = tmp_path / "baseline.json"
    with serving_in_thread(slow_app(ServingSettings(), delay), free_port()) as url:
        refreshed = refresh_baseline(home.settings, baseline, seconds=3, connections=8, url=url)
        assert refreshed.status == "PASS", refreshed.line()
        assert read_baseline(baseline).p99_ms >= 600
        same = latency_gate(home.settings, baseline, url=url)
        delay.write_text("1400")
        slow = latency_gate(home.settings, baseline, url=url)
    assert same.status == "PASS", same.line()
    assert slow.status == "FAIL"
    assert "above 1.20x" in slow.reason
