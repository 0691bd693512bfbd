"""The bundled example data sets: each example contract's name and the seeded generator that writes
its data. ``mlops data generate`` writes the data of the contract in use; a user's own contract has
no generator (its data is theirs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from mlops.contract import DataContract
from mlops.contracts import BUNDLED_CONTRACT, CONTRACTS_DIR
from mlops.errors import ConfigError


class ExampleGenerator(Protocol):
    def __call__(self, out: Path, rows: int, contract: DataContract, *, seed: int, scenario: str,
                 fraud_rate: float) -> float:
        """Write ``rows`` rows to ``out`` (.parquet or .csv); returns the share of positive labels."""
        ...


def _card_transactions(out: Path, rows: int, contract: DataContract, *, seed: int, scenario: str,
                       fraud_rate: float) -> float:
    from mlops.data.generator import write_transactions

    return write_transactions(out, rows, seed=seed, scenario=scenario,  # type: ignore[arg-type]
                              fraud_rate=fraud_rate, contract=contract)


def _terminal_payments(out: Path, rows: int, contract: DataContract, *, seed: int, scenario: str,
                       fraud_rate: float) -> float:
    from mlops.data.terminal_generator import write_payments

    if scenario != "none":
        raise ConfigError(f"the terminal-payments example has no scenario {scenario!r} (only none)")
    return write_payments(out, rows, contract, seed=seed)


EXAMPLES: dict[str, tuple[Path, Callable[..., float]]] = {
    "card-transactions": (BUNDLED_CONTRACT, _card_transactions),
    "terminal-payments": (CONTRACTS_DIR / "terminals.yaml", _terminal_payments),
}


def example_generator(contract: DataContract) -> ExampleGenerator:
    """The generator of the example ``contract`` names; ConfigError for a contract of one's own."""
    try:
        return EXAMPLES[contract.name][1]  # type: ignore[return-value]
    except KeyError:
        raise ConfigError(f"contract {contract.name!r} is not a bundled example ({', '.join(EXAMPLES)}), so there "
                          "is no generator for it: bring its data (`mlops contract check DATA CONTRACT`)") from None
