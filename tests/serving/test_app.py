"""The prediction service over a real registry and feature store: answers, parity, errors, 503.

No mocks: the module's own copy of the embedded platform (tests/serving/served_platform.py: a
promoted model and a materialized online store under a temporary MLOPS_HOME), and one app serves
it for the whole module. Every answered request is recorded in the online store, so each test uses
its own ids where it matters.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from served_platform import ServedPlatform

from feature_repo.online import open_online_features
from mlops import registry
from mlops.contract import DataContract
from mlops.features import compute_features
from mlops.histories import empty_history
from mlops.inference import OnnxModel
from mlops.prediction_log import PredictionInputs, log_dir, read_predictions
from serving.app import create_app
from serving.predictor import prediction_record
from serving.settings import ServingSettings

pytestmark = pytest.mark.integration

UNKNOWN_CUSTOMER = "C-never-seen"


@pytest.fixture(scope="module")
def client(platform_home: ServedPlatform) -> Iterator[TestClient]:
    with TestClient(create_app(platform_home.settings)) as test_client:
        yield test_client


def _expected_probability(platform: ServedPlatform, body: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """Score the request outside the service (before it records it): raw fields + features at its time."""
    contract = platform.contract
    keys = {e.join_key: body[e.join_key] for e in contract.entities}
    histories = open_online_features(platform.settings, contract).read(keys)
    features = compute_features(contract, histories, pd.Timestamp(body["event_timestamp"]), body)
    raw = {name: body[name] for name in contract.raw_inputs}
    probability = OnnxModel(platform.onnx_path).predict_proba([{**raw, **features}])
    return float(probability[0]), features


def test_healthz_names_the_served_version(client: TestClient, platform_home: ServedPlatform) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "model_name": platform_home.settings.model_name,
                               "model_version": platform_home.version, "serving_alias": "production",
                               "registry": platform_home.settings.resolved_tracking_uri, "source": "registry",
                               "warning": ""}


def test_predict_matches_the_onnx_model_on_online_features(
    client: TestClient, platform_home: ServedPlatform, body: dict[str, Any]
) -> None:
    expected, features = _expected_probability(platform_home, body)

    response = client.post("/predict", json=body)

    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["transaction_id"] == body["transaction_id"]
    assert answer["model_name"] == platform_home.settings.model_name
    assert answer["model_version"] == platform_home.version
    assert answer["threshold"] == pytest.approx(OnnxModel(platform_home.onnx_path).threshold)
    assert answer["probability"] == pytest.approx(expected, abs=1e-6)
    assert answer["decision"] == ("fraud" if answer["probability"] >= answer["threshold"] else "legit")
    assert answer["unknown_entities"] == []
    assert answer["unknown_categories"] == []
    assert pd.Timestamp(answer["event_timestamp"]) == pd.Timestamp(body["event_timestamp"])
    # The store really answered: a known customer has a spending history.
    assert features["customer_amount_mean_7d"] > 0


def test_unknown_customer_is_scored_with_empty_window_defaults_and_flagged(
    client: TestClient, platform_home: ServedPlatform, body: dict[str, Any]
) -> None:
    contract = platform_home.contract
    request = {**body, "transaction_id": "T-unknown", "customer_id": UNKNOWN_CUSTOMER}
    expected, features = _expected_probability(platform_home, request)
    moment = pd.Timestamp(body["event_timestamp"])
    empty = compute_features(contract, {v.view_name: empty_history(v) for v in contract.feature_views}, moment,
                             request)
    customer_features = [f.name for f in contract.feature_views[0].features]

    response = client.post("/predict", json=request)

    assert response.status_code == 200, response.text
    assert response.json()["probability"] == pytest.approx(expected, abs=1e-6)
    assert response.json()["unknown_entities"] == ["customer"]
    assert {n: features[n] for n in customer_features} == {n: empty[n] for n in customer_features}
    assert empty["customer_txn_count_24h"] == 0.0
    assert empty["customer_seconds_since_previous"] == 30 * 86_400.0


def test_unseen_category_is_scored_and_named(client: TestClient, body: dict[str, Any]) -> None:
    response = client.post("/predict", json={**body, "transaction_id": "T-zz", "country": "ZZ"})

    assert response.status_code == 200, response.text
    assert response.json()["unknown_categories"] == ["country"]


def test_event_time_drives_the_features_and_each_answer_is_recorded(
    client: TestClient, platform_home: ServedPlatform, body: dict[str, Any]
) -> None:
    card = {**body, "customer_id": "C-burst"}
    start = pd.Timestamp("2026-03-01T23:50:00Z")
    answers = [client.post("/predict", json={**card, "transaction_id": f"T-burst-{n}",
                                            "event_timestamp": (start + pd.Timedelta(minutes=n)).isoformat()})
               for n in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    logged = {r.event_id: r for r in read_predictions(log_dir(platform_home.settings))}
    counts = [logged[f"T-burst-{n}"].features["customer_txn_count_1h"] for n in range(5)]
    assert counts == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert logged["T-burst-0"].unknown_entities == ["customer"]
    assert logged["T-burst-1"].unknown_entities == []
    # The hour of day comes from the request's own time (23:50 vs 00:00 the next day).
    assert logged["T-burst-0"].features["hour_of_day_cos"] != logged["T-burst-4"].features["hour_of_day_cos"]


def test_a_missing_event_time_means_now(client: TestClient, body: dict[str, Any]) -> None:
    before = pd.Timestamp.now(tz="UTC")
    # Its own card and merchant: an event recorded "now" moves their history past the other tests' event time.
    request = {**_without(body, "event_timestamp"), "transaction_id": "T-now", "customer_id": "C-now",
               "merchant_id": "M-now"}
    response = client.post("/predict", json=request)

    assert response.status_code == 200, response.text
    assert before <= pd.Timestamp(response.json()["event_timestamp"]) <= pd.Timestamp.now(tz="UTC")


def _without(body: dict[str, Any], field: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != field}


MALFORMED: dict[str, tuple[Callable[[dict[str, Any]], str], str]] = {
    # case id: (body -> raw request text, field the error must name)
    "missing amount": (lambda b: json.dumps(_without(b, "amount")), "amount"),
    "amount not a number": (lambda b: json.dumps({**b, "amount": "abc"}), "amount"),
    "amount as numeric string": (lambda b: json.dumps({**b, "amount": "12.5"}), "amount"),
    "amount NaN": (lambda b: json.dumps(_without(b, "amount"))[:-1] + ', "amount": NaN}', "amount"),
    "amount Infinity": (lambda b: json.dumps({**b, "amount": float("inf")}), "amount"),
    "amount below contract min": (lambda b: json.dumps({**b, "amount": -5.0}), "amount"),
    "category not a string": (lambda b: json.dumps({**b, "country": 7}), "country"),
    "event time in the future": (lambda b: json.dumps({**b, "event_timestamp": "9999-01-01T00:00:00Z"}),
                                 "event_timestamp"),
    "extra field": (lambda b: json.dumps({**b, "colour": "red"}), "colour"),
    "empty customer id": (lambda b: json.dumps({**b, "customer_id": ""}), "customer_id"),
    "naive timestamp": (lambda b: json.dumps({**b, "event_timestamp": "2026-03-02"}), "event_timestamp"),
    "not JSON": (lambda b: "amount=12&country=US", "body"),
    "not an object": (lambda b: json.dumps([b]), "body"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_is_422_naming_the_field(
    client: TestClient, body: dict[str, Any], case: str
) -> None:
    make_text, field = MALFORMED[case]

    response = client.post("/predict", content=make_text(body), headers={"content-type": "application/json"})

    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["field"] == field
    if answer["error"] == "InvalidRequest":  # schema errors list every problem; InputError is one
        assert [item["field"] for item in answer["detail"]] == [field]
    else:
        assert answer["error"] == "InputError"
        assert "future" in answer["detail"]


def test_openapi_documents_the_contract_request(client: TestClient, contract: DataContract) -> None:
    response = client.get("/openapi.json")

    assert response.status_code == 200
    request_body = response.json()["paths"]["/predict"]["post"]["requestBody"]
    schema = request_body["content"]["application/json"]["schema"]
    assert schema["properties"]["amount"]["minimum"] == pytest.approx(0.01)
    assert schema["properties"]["merchant_category"]["maxLength"] == 64
    assert schema["additionalProperties"] is False
    # Swagger's "Try it out" starts from the contract's example: a known category each, answered 200.
    example = request_body["content"]["application/json"]["example"]
    for name in contract.model_inputs.categorical:
        assert example[name] in (contract.column(name).categories or ()), name
    answer = client.post("/predict", json=example)
    assert answer.status_code == 200, answer.text
    assert answer.json()["unknown_categories"] == []
    batch = response.json()["paths"]["/predict/batch"]["post"]["requestBody"]["content"]["application/json"]
    assert batch["example"] == {"instances": [example]}


def test_openapi_infer_example_is_the_graphs_inputs_and_is_answered(
    client: TestClient, contract: DataContract, platform_home: ServedPlatform
) -> None:
    document = client.get("/openapi.json").json()
    [path] = [p for p in document["paths"] if p.endswith("/infer")]
    example = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["example"]
    graph = OnnxModel(platform_home.onnx_path).session.get_inputs()
    assert [t["name"] for t in example["inputs"]] == [i.name for i in graph]  # every input, in the graph's order
    for tensor, graph_input in zip(example["inputs"], graph, strict=True):
        assert tensor["datatype"] == ("BYTES" if graph_input.type == "tensor(string)" else "FP32")
    for name in contract.model_inputs.categorical:
        [tensor] = [t for t in example["inputs"] if t["name"] == name]
        assert tensor["data"][0] in (contract.column(name).categories or ()), name
    answer = client.post(path.replace("{name}", platform_home.settings.model_name), json=example)
    assert answer.status_code == 200, answer.text
    assert 0.0 <= answer.json()["outputs"][0]["data"][0] <= 1.0


def test_without_a_promoted_model_the_app_starts_and_answers_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]
) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "empty-home"))
    settings = ServingSettings()

    with TestClient(create_app(settings)) as empty:
        health = empty.get("/healthz")
        predict = empty.post("/predict", json=body)

    for response in (health, predict):
        assert response.status_code == 503
        assert response.json()["error"] == "ModelNotReadyError"
        assert settings.serving_alias in response.json()["detail"]
    # The per-process download folder is removed at shutdown.
    assert list((settings.resolved_home / "serving").iterdir()) == []


def test_each_amount_is_scored_by_the_model_at_the_contract_bounds(
    client: TestClient, platform_home: ServedPlatform, body: dict[str, Any]
) -> None:
    probabilities = []
    for n, amount in enumerate((0.01, 50.0, 50_000.0)):  # the contract's bounds and one in between
        request = {**body, "transaction_id": f"T-amount-{n}", "customer_id": f"C-amount-{n}", "amount": amount}
        expected, _ = _expected_probability(platform_home, request)
        response = client.post("/predict", json=request)
        assert response.status_code == 200, response.text
        assert response.json()["probability"] == pytest.approx(expected, abs=1e-6)
        probabilities.append(response.json()["probability"])
    # The amount reaches the graph: three amounts, three different scores.
    assert len(set(probabilities)) == 3


def test_a_probability_equal_to_the_threshold_is_fraud_in_answer_and_log(
    client: TestClient, body: dict[str, Any]
) -> None:
    # A request cannot land exactly on the threshold, so the served model's decision is checked on
    # the scores at and just below it, through the service's own predictor and log record.
    state = client.app.state.service  # type: ignore[attr-defined]
    loaded, predictor = state.manager.require(), state.predictor
    threshold = loaded.model.threshold
    gathered = PredictionInputs(event_id="T-boundary", event_timestamp=datetime.now(UTC), entities={}, inputs={},
                                features={}, unknown_entities=[], unknown_categories=[])
    below = float(np.nextafter(threshold, 0.0))
    for probability, decision in ((threshold, "fraud"), (below, "legit")):
        record = prediction_record(loaded, gathered, probability, decisions=predictor.contract.decisions,
                                   request_id="r1", latency_s=None)
        assert record.decision == decision
        assert predictor.answer(loaded, record)["decision"] == decision


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_amount_is_refused_by_the_finite_number_rule(
    client: TestClient, body: dict[str, Any], value: str
) -> None:
    text = json.dumps(_without(body, "amount"))[:-1] + f', "amount": {value}}}'

    response = client.post("/predict", content=text, headers={"content-type": "application/json"})

    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    # The finite rule, not the contract's bounds (a column without bounds relies on it alone).
    assert (problem["field"], problem["type"], problem["msg"]) == (
        "amount", "finite_number", "Input should be a finite number")


def test_shadow_mode_logs_the_challenger_beside_the_champion(
    platform_home: ServedPlatform, body: dict[str, Any]
) -> None:
    settings = platform_home.settings
    registry.promote(settings, platform_home.version, alias="challenger", actor="test", reason="shadow test")
    shadowed = settings.model_copy(update={"shadow": True})

    with TestClient(create_app(shadowed)) as shadow_client:
        response = shadow_client.post("/predict", json={**body, "transaction_id": "T-shadow"})
    # Leaving the block stops the app, which waits for the shadow scorer and closes the log.

    assert response.status_code == 200, response.text
    logged = [r for r in read_predictions(log_dir(settings)) if r.event_id == "T-shadow"]
    assert sorted(r.role for r in logged) == ["challenger", "champion"]
    champion, challenger = sorted(logged, key=lambda r: r.role != "champion")
    assert challenger.probability == pytest.approx(champion.probability, abs=1e-6)
    assert challenger.features == champion.features


def test_concurrent_requests_are_answered_together_and_fail_alone(
    client: TestClient, platform_home: ServedPlatform, body: dict[str, Any]
) -> None:
    """Concurrent requests meet in one batch: one ONNX call, each sees the earlier ones of its card,
    and one request's own error (a future event time) fails it alone."""
    card = {**body, "customer_id": "C-turn"}
    start = pd.Timestamp("2026-03-02T08:00:00Z")
    good = [{**card, "transaction_id": f"T-turn-{n}", "event_timestamp": (start + pd.Timedelta(minutes=n)).isoformat()}
            for n in range(4)]
    future = {**card, "transaction_id": "T-turn-future", "event_timestamp": "9999-01-01T00:00:00Z"}
    metrics = _metrics(client)
    before = [metrics.get_sample_value(f"mlops_batch_size_{n}") or 0.0 for n in ("count", "sum")]

    async def send_together() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://service") as together:
            return await asyncio.gather(*(together.post("/predict", json=b) for b in [*good[:2], future, *good[2:]]))

    responses = asyncio.run(send_together())

    assert [r.status_code for r in responses] == [200, 200, 422, 200, 200]
    assert responses[2].json()["field"] == "event_timestamp"
    answered = [r.json()["transaction_id"] for r in responses if r.status_code == 200]
    assert answered == [b["transaction_id"] for b in good]
    # One inference call scored the four accepted requests.
    after = [metrics.get_sample_value(f"mlops_batch_size_{n}") or 0.0 for n in ("count", "sum")]
    assert (after[0] - before[0], after[1] - before[1]) == (1.0, 4.0)
    logged = {r.event_id: r for r in read_predictions(log_dir(platform_home.settings))}
    assert [logged[b["transaction_id"]].features["customer_txn_count_1h"] for b in good] == [0.0, 1.0, 2.0, 3.0]
    assert "T-turn-future" not in logged


def _metrics(client: TestClient) -> CollectorRegistry:
    return client.app.state.service.metrics.registry  # type: ignore[attr-defined,no-any-return]
