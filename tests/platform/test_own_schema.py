"""A schema that is not the card example's: integer ids, upper-case names, no categorical column
(the terminal-payments example), through the contract, the names, the generator, export and the API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from pydantic import ValidationError

from mlops.contract import DataContract, Decisions, load_contract
from mlops.contracts import CONTRACTS_DIR
from mlops.data.examples import example_generator
from mlops.data.terminal_generator import generate_payments
from mlops.errors import ConfigError
from mlops.feature_replay import replay_features
from mlops.inference import OnnxModel
from mlops.model import TabularMLP, encode, fit_vocabularies
from mlops.onnx_export import check_parity, export_onnx
from mlops.settings import Settings
from serving.schemas import build_request_model, build_response_model

pytestmark = pytest.mark.unit

TERMINALS = CONTRACTS_DIR / "terminals.yaml"


@pytest.fixture(scope="module")
def terminals() -> DataContract:
    return load_contract(TERMINALS)


@pytest.fixture(scope="module")
def payments(terminals: DataContract) -> pd.DataFrame:
    frame = generate_payments(4000, terminals, seed=3)
    return pd.concat([frame, replay_features(frame, terminals)], axis=1)


def test_fields_that_mean_nothing_for_a_data_set_are_optional(terminals: DataContract) -> None:
    assert terminals.model_inputs.categorical == ()
    assert (terminals.split.validation_fraction, terminals.split.test_fraction) == (0.15, 0.15)
    assert terminals.key_is_int("TRANSACTION_ID")
    assert terminals.key_is_int("TERMINAL_ID")
    assert terminals.decisions == Decisions(positive="fraud", negative="genuine")
    assert terminals.invariant_fields == ["TRANSACTION_ID"]  # the id, when the contract names none


def test_a_small_data_set_generates_even_when_no_owner_is_compromised(terminals: DataContract) -> None:
    # 1,000 payments over few terminals and cards can draw no compromise period at all (seed 77 once failed).
    frame = generate_payments(1_000, terminals, seed=77)
    assert len(frame) == 1_000
    assert set(frame[terminals.label_column].unique()) <= {0, 1}


def test_decisions_must_differ_and_keys_must_be_ids(terminals: DataContract) -> None:
    with pytest.raises(ValidationError, match="positive and negative are both 'yes'"):
        Decisions(positive="yes", negative="yes")
    raw = terminals.model_dump()
    raw["columns"] = [{**c, "dtype": "float"} if c["name"] == "TERMINAL_ID" else c for c in raw["columns"]]
    with pytest.raises(ValidationError, match="'TERMINAL_ID' must have dtype string or int"):
        DataContract.model_validate(raw)
    raw = terminals.model_dump()
    raw["behaviour"] = {"directional": [{"input": "TX_FRAUD", "direction": "not_lower"}]}
    with pytest.raises(ValidationError, match=r"not raw numeric model inputs: \['TX_FRAUD'\]"):
        DataContract.model_validate(raw)


def test_names_default_from_the_contract_and_settings_override_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLOPS_EXPERIMENT", raising=False)
    monkeypatch.delenv("MLOPS_MODEL_NAME", raising=False)
    own = Settings(contract_path=TERMINALS)
    assert (own.experiment, own.model_name, own.pipeline_name) == (
        "terminal-payments", "terminal-payments", "terminal-payments-training")
    bundled = Settings()
    assert (bundled.experiment, bundled.model_name) == ("card-transactions", "card-transactions")
    monkeypatch.setenv("MLOPS_MODEL_NAME", "chosen")
    assert Settings(contract_path=TERMINALS).model_name == "chosen"


def test_the_generator_writes_the_contracts_schema_with_fraud_at_terminals(terminals: DataContract) -> None:
    frame = generate_payments(20_000, terminals, seed=11)
    assert list(frame.columns) == ["TRANSACTION_ID", "TX_DATETIME", "CUSTOMER_ID", "TERMINAL_ID", "TX_AMOUNT",
                                   "TX_FRAUD"]
    assert all(frame[c].dtype == np.int64 for c in ("TRANSACTION_ID", "CUSTOMER_ID", "TERMINAL_ID", "TX_FRAUD"))
    assert frame["TRANSACTION_ID"].is_unique
    assert frame["TX_DATETIME"].is_monotonic_increasing
    assert 0.005 < frame["TX_FRAUD"].mean() < 0.05
    # Compromised terminals: fraud concentrates on few terminals, far beyond what chance would give.
    by_terminal = frame.groupby("TERMINAL_ID")["TX_FRAUD"].mean()
    assert (by_terminal > 0.15).sum() >= 5
    assert by_terminal.median() == 0
    assert frame.equals(generate_payments(20_000, terminals, seed=11))  # seeded


def test_a_contract_of_ones_own_has_no_generator(terminals: DataContract) -> None:
    assert example_generator(terminals) is not None
    with pytest.raises(ConfigError, match="not a bundled example"):
        example_generator(terminals.model_copy(update={"name": "my-data"}))


def test_export_without_categorical_inputs_matches_torch(terminals: DataContract, payments: pd.DataFrame,
                                                          tmp_path: Path) -> None:
    vocabs = fit_vocabularies(terminals)
    assert vocabs == {}
    torch.manual_seed(0)
    model = TabularMLP.for_contract(terminals, vocabs)
    model.fit_scaler(encode(payments, terminals, vocabs)[0])
    path = export_onnx(model.eval(), terminals, vocabs, tmp_path / "model.onnx", threshold=0.4, metadata={})
    served = OnnxModel(path)
    assert served.input_names == terminals.numeric_inputs  # numeric fields only
    assert check_parity(model, path, payments, terminals, vocabs, tolerance=1e-5) <= 1e-5
    scores = served.predict_proba(payments.head(7))
    assert scores.shape == (7,)
    assert np.all((scores >= 0) & (scores <= 1))


def test_the_request_takes_integer_ids_and_the_answer_the_contracts_decisions(terminals: DataContract) -> None:
    request_model = build_request_model(terminals)
    body = {"TRANSACTION_ID": 12, "CUSTOMER_ID": 7, "TERMINAL_ID": 3, "TX_AMOUNT": 25.5,
            "TX_DATETIME": "2026-05-01T10:00:00Z"}
    assert request_model.model_validate(body).TRANSACTION_ID == 12  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="TERMINAL_ID"):
        request_model.model_validate({**body, "TERMINAL_ID": "3"})  # strict: text is not an integer id
    response_model = build_response_model(terminals)
    answer = {"TRANSACTION_ID": 12, "request_id": "r", "probability": 0.9, "decision": "fraud", "threshold": 0.5,
              "model_name": "m", "model_version": "1", "TX_DATETIME": "2026-05-01T10:00:00Z",
              "unknown_entities": [], "unknown_categories": [], "retry": False, "features_exact": True}
    assert response_model.model_validate(answer).decision == "fraud"  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="decision"):
        response_model.model_validate({**answer, "decision": "legit"})
