"""The /predict and /infer examples in the OpenAPI document are drawn from the contract: they validate
against the request models, name only categories the contract lists, ids have the contract's dtype,
and the /infer example carries every graph input inside its declared range."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlops.contract import load_contract
from serving.oip import InferRequest, contract_bounds
from serving.schemas import build_request_model, infer_example, request_example

pytestmark = pytest.mark.unit

CONTRACTS = sorted((Path(__file__).resolve().parents[2] / "platform" / "mlops" / "contracts").glob("*.yaml"))


@pytest.mark.parametrize("path", CONTRACTS, ids=[p.stem for p in CONTRACTS])
def test_the_example_validates_and_names_contract_categories(path: Path) -> None:
    contract = load_contract(path)
    example = request_example(contract)
    request = build_request_model(contract).model_validate(example)  # strict: a wrong id dtype fails here
    assert request.model_dump(exclude_none=True) == example
    keys = [contract.id_column, *(entity.join_key for entity in contract.entities)]
    for key in keys:
        assert isinstance(example[key], int) == contract.key_is_int(key), key
    assert len({example[key] for key in keys}) == len(keys)  # a distinct entity each
    for name in contract.model_inputs.categorical:
        assert example[name] in (contract.column(name).categories or ()), name
    assert set(example) == set(build_request_model(contract).model_fields) - {contract.timestamp_column}


def test_both_id_shapes_are_covered() -> None:
    shapes = {contract.key_is_int(contract.id_column) for contract in map(load_contract, CONTRACTS)}
    assert shapes == {True, False}


@pytest.mark.parametrize("path", CONTRACTS, ids=[p.stem for p in CONTRACTS])
def test_the_infer_example_holds_every_graph_input_in_range(path: Path) -> None:
    contract = load_contract(path)
    example = infer_example(contract, datetime(2026, 12, 5, 14, 30, tzinfo=UTC))
    request = InferRequest.model_validate(example)
    assert [t.name for t in request.inputs] == contract.numeric_inputs + list(contract.model_inputs.categorical)
    bounds = contract_bounds(contract)
    for tensor in request.inputs:
        [value] = tensor.data or []
        if tensor.datatype == "BYTES":
            assert value in (contract.column(tensor.name).categories or ()), tensor.name
            continue
        low, high = bounds.get(tensor.name, (None, None))
        assert isinstance(value, float), tensor.name
        assert low is None or value >= low, (tensor.name, value)
        assert high is None or value <= high, (tensor.name, value)
