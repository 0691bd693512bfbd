"""The /predict example in the OpenAPI document is drawn from the contract: it validates against the
request model, names only categories the contract lists, and ids have the contract's dtype."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlops.contract import load_contract
from serving.schemas import build_request_model, request_example

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
