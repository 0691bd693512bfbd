"""A gradient-boosted tree candidate against an MLP in production, through everything after training
unchanged: evaluate's promotion rule, staging, the canary judge on live traffic, promotion, rollback.

Version 1 is the default family (`mlp`) put in production by the real pipeline (the default canary
rollout) on the oldest rows. Each candidate is a pipeline run with ``MLOPS_MODEL_FAMILY=xgboost`` on
the oldest CANDIDATE_ROWS:

- a clearly worse tree (one stump: one round of depth 1) is rejected by evaluate's rule against the
  MLP and never reaches staging;
- a better tree (the family's defaults) is accepted, staged on a canary share; the running service
  (its own process, its real prediction log) answers the rows after the candidate's data; labels
  arrive and the judge the monitoring schedule runs (`mlops model canary judge --if-running`)
  promotes it; the service follows and answers from the tree, on /predict, on /v2 (the binary
  tensor extension) and on gRPC alike, and the tree's drift reference profile is its own; then
  `mlops model rollback` returns production to the MLP, and the service follows back.

The canary share is CANARY_PERCENT (not the default 10 %) so that a few thousand live rows give both
arms the judge's default minimum rows and labels. The latency check keeps its defaults: both arms
answer in one or two milliseconds, and on a two-core machine shared with other test runs the p99 of
one arm's 2,000 requests has read 1.7 times the other's for the same service (the trees score a row
in process as fast as the MLP: benchmarks/model_families.py), which the check's 5 ms floor absorbs.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import tritonclient.grpc as oip_grpc
import tritonclient.http as oip_http
from live_service import serving_before
from typer.testing import CliRunner

from mlops import registry
from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.prediction_log import log_dir, read_predictions
from mlops.registry_audit import read_verdicts
from mlops_cli.app import app
from monitoring.labels import ingest_labels
from monitoring.references import fetch_profile
from pipelines.demo import free_port
from pipelines.demo_replay import request_body
from pipelines.orchestration.runner import PipelineOutcome, run_pipeline
from pipelines.settings import PipelineSettings

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
ROWS = 24_000  # 60 days of one population, in time order: ...
FIRST_ROWS = 4_000  # ... the MLP trains on the oldest 4,000 (one epoch),
CANDIDATE_ROWS = 20_000  # each tree on the oldest 20,000, and the 4,000 after them are live traffic
POPULATION_ROWS = 40_000
FRAUD_RATE = 0.05
CANARY_PERCENT = 50.0
SEED = 23
STUMP = '{"n_estimators": 1, "max_depth": 1}'
V2_ROWS = 8


@dataclass
class Home:
    settings: PipelineSettings
    contract: DataContract
    trained: pd.DataFrame  # the candidates' rows (the oldest CANDIDATE_ROWS)
    live: pd.DataFrame  # the rows after them, posted to the service
    tmp: Path


def _pipeline(home: Home, source: pd.DataFrame, name: str, *, family: str, params: str = "{}",
              epochs: int = 1) -> PipelineOutcome:
    path = home.tmp / f"{name}.parquet"
    source.to_parquet(path, index=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_MODEL_FAMILY", family)
        patch.setenv("MLOPS_MODEL_PARAMS", params)
        patch.setenv("MLOPS_MAX_EPOCHS", str(epochs))
        return run_pipeline(str(path), PipelineSettings(), run_name=name, runner="inline")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Home]:
    """The MLP, version 1, in production through the pipeline with the default (canary) rollout."""
    tmp = tmp_path_factory.mktemp("tree-against-mlp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_HOME", str(tmp / "home"))
        patch.setenv("MLOPS_MODEL_POLL_INTERVAL_S", "1")
        patch.setenv("MLOPS_CANARY_PERCENT", str(CANARY_PERCENT))
        patch.setenv("MLOPS_GRPC_PORT", str(free_port("127.0.0.1")))  # the service's gRPC port too
        for name in ("MLOPS_ROLLOUT", "MLOPS_CALIBRATION", "MLOPS_PARAMS_FILE", "MLOPS_CONTRACT_PATH"):
            patch.delenv(name, raising=False)
        settings = PipelineSettings()
        assert (settings.rollout, settings.model_family) == ("canary", "mlp")
        contract = load_contract(settings.contract_path)
        data = generate_transactions(ROWS, seed=SEED, fraud_rate=FRAUD_RATE, population_rows=POPULATION_ROWS)
        ordered = data.sort_values([contract.timestamp_column, contract.id_column], kind="stable")
        made = Home(settings, contract, ordered.iloc[:CANDIDATE_ROWS], ordered.iloc[CANDIDATE_ROWS:], tmp)
        first = _pipeline(made, ordered.iloc[:FIRST_ROWS], "mlp", family="mlp")
        assert (first.decision, first.version, first.production_version) == ("promote", "1", "1")
        yield made


def _run(home: Home, version: str) -> tuple[str, dict[str, float]]:
    """The version's family and its run's metrics (evaluate's, with production's on the same test split)."""
    client = registry.client(home.settings)
    run_id = client.get_model_version(home.settings.model_name, version).run_id
    assert run_id is not None
    run = client.get_run(run_id)
    return str(run.data.params["model_family"]), dict(run.data.metrics)


def _serving(home: Home) -> AbstractContextManager[str]:
    """The service in its own process, the online store just before the live rows."""
    return serving_before(home.settings, home.contract, home.live, home.tmp)


def _until(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}"
        time.sleep(0.2)


def _serves(base: str, version: str) -> Callable[[], bool]:
    return lambda: httpx.get(f"{base}/healthz", timeout=10).json().get("model_version") == version


def _judge() -> str:
    """The monitoring schedule's call (infra's canary-judge CronJob)."""
    result = CliRunner().invoke(app, ["model", "canary", "judge", "--if-running"])
    assert result.exit_code == 0, result.output
    return result.output


def _v2_matches_predict(home: Home, base: str, http: httpx.Client, version: str) -> None:
    """V2_ROWS /predict answers, then the same decision inputs (as logged) through /v2 with binary tensors
    and through gRPC ModelInfer."""
    rows = home.live.tail(V2_ROWS)
    answers = [http.post("/predict", json={**request_body(row, home.contract),
                                           home.contract.id_column: f"T-v2-{version}-{i}"}).json()
               for i, (_, row) in enumerate(rows.iterrows())]
    assert {a["model_version"] for a in answers} == {version}
    logged = {r.event_id: r for r in read_predictions(log_dir(home.settings))}
    inputs = [{**logged[a["transaction_id"]].inputs, **logged[a["transaction_id"]].features} for a in answers]
    client = oip_http.InferenceServerClient(url=base.removeprefix("http://"))
    name = home.settings.model_name
    metadata = client.get_model_metadata(name)
    assert metadata["versions"] == [version]
    output = metadata["outputs"][0]["name"]
    arrays = {spec["name"]: (np.array([[str(r[spec["name"]]).encode() if spec["datatype"] == "BYTES"
                                        else r[spec["name"]]] for r in inputs],
                                      dtype=np.object_ if spec["datatype"] == "BYTES" else np.float32),
                             spec["datatype"]) for spec in metadata["inputs"]}
    tensors = []
    for input_name, (values, datatype) in arrays.items():
        tensor = oip_http.InferInput(input_name, list(values.shape), datatype)
        tensor.set_data_from_numpy(values)  # binary_data=True: the client's default
        tensors.append(tensor)
    scores = client.infer(name, tensors, request_id=f"v2-{version}").as_numpy(output).reshape(-1)
    np.testing.assert_allclose(scores, [a["probability"] for a in answers], atol=1e-6)
    grpc = oip_grpc.InferenceServerClient(url=f"127.0.0.1:{os.environ['MLOPS_GRPC_PORT']}")
    grpc_tensors = []
    for input_name, (values, datatype) in arrays.items():
        grpc_tensor = oip_grpc.InferInput(input_name, list(values.shape), datatype)
        grpc_tensor.set_data_from_numpy(values)
        grpc_tensors.append(grpc_tensor)
    assert grpc.get_model_metadata(name, as_json=True)["versions"] == [version]
    grpc_scores = grpc.infer(name, grpc_tensors, request_id=f"grpc-{version}").as_numpy(output).reshape(-1)
    np.testing.assert_allclose(grpc_scores, scores, atol=1e-6)


def test_a_clearly_worse_tree_is_rejected_by_the_same_rule_and_never_staged(home: Home) -> None:
    settings = home.settings
    staged = registry.alias_version(settings, registry.STAGING_ALIAS)  # a tree promoted earlier keeps it
    outcome = _pipeline(home, home.trained, "stump", family="xgboost", params=STUMP)
    assert outcome.decision == "reject", outcome
    assert outcome.rollout == ""
    assert outcome.production_version == "1"
    assert registry.alias_version(settings) == "1"
    assert registry.alias_version(settings, registry.STAGING_ALIAS) == staged != outcome.version
    assert registry.canary(settings) is None
    version = str(outcome.version)
    family, metrics = _run(home, version)
    assert family == "xgboost"
    # clearly worse: it ranks the test split worse than the MLP in production does
    assert metrics["test_pr_auc"] < metrics["production_test_pr_auc"] - 0.05, metrics
    tags = registry.client(settings).get_model_version(settings.model_name, version).tags
    print(tags["decision_reason"])
    assert tags["decision"] == "reject"
    # evaluate's one rule, against the MLP in production: the stump's F1 gain is not surely above the margin
    assert "F1 gain over production" in tags["decision_reason"], tags["decision_reason"]
    assert "lower bound below margin" in tags["decision_reason"], tags["decision_reason"]


def test_a_better_tree_is_promoted_by_its_canary_and_a_rollback_returns_to_the_mlp(home: Home) -> None:
    settings, contract = home.settings, home.contract
    outcome = _pipeline(home, home.trained, "tree", family="xgboost")
    assert outcome.decision == "promote", outcome
    tree = str(outcome.version)
    family, metrics = _run(home, tree)
    assert family == "xgboost"
    assert metrics["test_pr_auc"] > metrics["production_test_pr_auc"], metrics
    reason = registry.client(settings).get_model_version(settings.model_name, tree).tags["decision_reason"]
    print(reason)
    assert "lower bound >= margin" in reason, reason
    assert (outcome.production_version, registry.alias_version(settings)) == ("1", "1")
    assert registry.alias_version(settings, registry.STAGING_ALIAS) == tree
    assert registry.canary(settings) == (tree, CANARY_PERCENT)

    live = home.live
    with _serving(home) as base, httpx.Client(base_url=base, timeout=60) as http:
        answers = [http.post("/predict", json=request_body(row, contract)) for _, row in live.iterrows()]
        assert Counter(a.status_code for a in answers) == Counter({200: len(live)})
        served = Counter(str(a.json()["model_version"]) for a in answers)
        assert set(served) == {"1", tree}
        assert 0.35 <= served[tree] / len(live) <= 0.65, served

        labels = home.tmp / "labels.parquet"
        live[[contract.id_column, contract.label_column]].to_parquet(labels, index=False)
        ingest_labels(labels, contract, settings.monitoring_dir)
        promoted = _judge()
        print(promoted)
        assert "verdict: promote" in promoted, promoted
        for check in ("latency p99", "score distribution", "decision rate", "PR-AUC"):
            assert f"{check}: pass" in promoted, promoted
        _until(_serves(base, tree), "the service on the tree")
        _v2_matches_predict(home, base, http, tree)

        rolled = CliRunner().invoke(app, ["model", "rollback", "--reason", "back to the MLP"])
        assert rolled.exit_code == 0, rolled.output
        _until(_serves(base, "1"), "the service back on the MLP")
        again = http.post("/predict", json={**request_body(live.iloc[-1], contract),
                                            contract.id_column: "T-after-rollback"})
        assert (again.status_code, again.json()["model_version"]) == (200, "1")
        _v2_matches_predict(home, base, http, "1")

    assert registry.alias_version(settings) == "1"
    assert registry.canary(settings) is None
    moves = [(m.from_version, m.to_version, m.reason) for m in registry.history(settings, settings.serving_alias)]
    assert [(a, b) for a, b, _ in moves] == [(None, "1"), ("1", tree), (tree, "1")]
    assert moves[-1][2] == "back to the MLP"
    stages = {v: registry.client(settings).get_model_version(settings.model_name, v).current_stage for v in ("1", tree)}
    assert stages == {"1": "Production", tree: "Archived"}
    verdicts = read_verdicts(registry.client(settings), settings)
    assert [(v.version, v.verdict) for v in verdicts][-1] == (tree, "promote")
    # The drift reference profile of the tree version is its own: its scores, its threshold.
    profiles = {v: fetch_profile(settings, settings.model_name, v) for v in ("1", tree)}
    assert profiles[tree].rows > 0
    assert profiles[tree].threshold is not None
    assert profiles[tree].probability != profiles["1"].probability
    assert set(profiles[tree].numeric) == set(profiles["1"].numeric)

