"""The prediction service over a real registry and feature store: answers, parity, errors, 503.

No mocks: a module fixture builds the embedded platform under a temporary MLOPS_HOME (generate
transactions, publish and materialize features, train a small model, export it, log, register
and promote it; about a minute on two cores) and one app serves it for the whole module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient

from mlops import feature_store, registry
from mlops.contract import DataContract, load_contract
from mlops.data.generator import generate_transactions
from mlops.feature_store import online_features, open_store
from mlops.features import feature_defaults
from mlops.inference import OnnxModel
from mlops.settings import Settings
from pipelines.steps.export import export_and_check, log_model_to_mlflow
from pipelines.steps.train import TrainParams, train_model
from serving.app import create_app

UNKNOWN_CUSTOMER = "C-never-seen"
N_ROWS = 3000
SEED = 3
MAX_EPOCHS = 3


@dataclass(frozen=True)
class ServedPlatform:
    settings: Settings
    contract: DataContract
    transactions: pd.DataFrame
    onnx_path: Path
    version: str


def _time_split(frame: pd.DataFrame, contract: DataContract) -> tuple[pd.DataFrame, ...]:
    ordered = frame.sort_values(contract.timestamp_column, kind="stable").reset_index(drop=True)
    n_test = int(len(ordered) * contract.split.test_fraction)
    n_val = int(len(ordered) * contract.split.validation_fraction)
    n_train = len(ordered) - n_val - n_test
    return ordered.iloc[:n_train], ordered.iloc[n_train:n_train + n_val], ordered.iloc[n_train + n_val:]


def _build(settings: Settings) -> ServedPlatform:
    contract = load_contract(settings.contract_path)
    transactions = generate_transactions(N_ROWS, seed=SEED)
    store = feature_store.publish_features(transactions, contract, settings)
    feature_store.materialize(store, transactions, contract)
    train, val, test = _time_split(feature_store.training_features(store, transactions, contract), contract)

    params = TrainParams.from_settings(settings)
    result = train_model(train, val, contract, params)
    export = export_and_check(result.trained, contract, test, settings.runs_dir / "serving-test",
                              settings.parity_tolerance, metadata={"model_name": settings.model_name})

    experiment_id = registry.ensure_experiment(settings)
    client = registry.client(settings)
    run_id = client.create_run(experiment_id).info.run_id
    model_uri = log_model_to_mlflow(run_id, export)
    client.set_terminated(run_id)
    version = registry.register_version(settings, model_uri, run_id, tags={"source": "tests/serving"})
    registry.promote(settings, version)
    return ServedPlatform(settings, contract, transactions, export.onnx_path, version)


@pytest.fixture(scope="module")
def platform_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedPlatform]:
    """MLOPS_HOME with a promoted model and a materialized online store; env set for the module."""
    home = tmp_path_factory.mktemp("served-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLOPS_HOME", str(home))
        patch.setenv("MLOPS_MAX_EPOCHS", str(MAX_EPOCHS))
        yield _build(Settings())


@pytest.fixture(scope="module")
def client(platform_home: ServedPlatform) -> Iterator[TestClient]:
    with TestClient(create_app(platform_home.settings)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def body(platform_home: ServedPlatform) -> dict[str, Any]:
    """A valid request for the busiest customer (it surely has features in the online store)."""
    data = platform_home.transactions
    customer = data["customer_id"].value_counts().index[0]
    row = data[data["customer_id"] == customer].iloc[-1]
    return {
        "transaction_id": "T-test-1",
        "customer_id": customer,
        "merchant_id": row["merchant_id"],
        "event_timestamp": "2026-03-02T12:00:00+00:00",
        "amount": 412.5,
        "merchant_category": "electronics",
        "channel": "online",
        "country": "NG",
    }


def _expected_probability(platform: ServedPlatform, body: dict[str, Any]) -> tuple[float, pd.DataFrame]:
    """Score the request outside the service: raw fields + online features into the exported graph."""
    contract = platform.contract
    keys = {e.join_key: body[e.join_key] for e in contract.entities}
    features = online_features(open_store(platform.settings), [keys], contract)
    raw = pd.DataFrame([{k: v for k, v in body.items() if k not in keys}])
    probability = OnnxModel(platform.onnx_path).predict_proba(pd.concat([raw, features], axis=1))
    return float(probability[0]), features


def test_healthz_names_the_served_version(client: TestClient, platform_home: ServedPlatform) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "model_name": platform_home.settings.model_name,
                               "model_version": platform_home.version}


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
    # The store really answered: a known customer has a spending history.
    assert float(features["customer_amount_mean_7d"].iloc[0]) > 0


def test_unknown_customer_gets_no_history_defaults(
    client: TestClient, platform_home: ServedPlatform, body: dict[str, Any]
) -> None:
    request = {**body, "customer_id": UNKNOWN_CUSTOMER}
    expected, features = _expected_probability(platform_home, request)
    defaults = feature_defaults(platform_home.contract)
    customer_features = [name for name in defaults if name.startswith("customer_")]

    response = client.post("/predict", json=request)

    assert response.status_code == 200, response.text
    assert response.json()["probability"] == pytest.approx(expected, abs=1e-6)
    assert features[customer_features].iloc[0].to_dict() == {n: defaults[n] for n in customer_features}


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
    "unknown category": (lambda b: json.dumps({**b, "country": "ZZ"}), "country"),
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
    assert answer["error"] == "InvalidRequest"
    assert answer["field"] == field
    assert [item["field"] for item in answer["detail"]] == [field]


def test_openapi_documents_the_contract_request(client: TestClient) -> None:
    response = client.get("/openapi.json")

    assert response.status_code == 200
    request_body = response.json()["paths"]["/predict"]["post"]["requestBody"]
    schema = request_body["content"]["application/json"]["schema"]
    assert schema["properties"]["amount"]["minimum"] == pytest.approx(0.01)
    assert "gift_cards" in schema["properties"]["merchant_category"]["enum"]
    assert schema["additionalProperties"] is False


def test_without_a_promoted_model_the_app_starts_and_answers_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]
) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "empty-home"))
    settings = Settings()

    with TestClient(create_app(settings)) as empty:
        health = empty.get("/healthz")
        predict = empty.post("/predict", json=body)

    for response in (health, predict):
        assert response.status_code == 503
        assert response.json()["error"] == "ModelNotReadyError"
        assert settings.serving_alias in response.json()["detail"]
    # The per-process download folder is removed at shutdown.
    assert list((settings.resolved_home / "serving").iterdir()) == []


def test_probability_is_a_finite_number_in_unit_interval(client: TestClient, body: dict[str, Any]) -> None:
    probabilities = [client.post("/predict", json={**body, "amount": amount}).json()["probability"]
                     for amount in (0.01, 50.0, 50_000.0)]

    assert np.isfinite(probabilities).all()
    assert all(0.0 <= p <= 1.0 for p in probabilities)
