"""Seeded card payments at terminals: the second example, a schema that is not the first one's.

Modelled on the public card-fraud simulators (customers who pay at a few terminals near them, with
their own spending habit): integer ids, upper-case column names, no categorical column. Three kinds
of fraud, two of which the plain window features cannot see:

- an amount over ``LARGE_AMOUNT`` is fraud (the raw amount shows it);
- a compromised terminal: every payment at it for ``TERMINAL_COMPROMISE`` is fraud. Nothing in a
  payment differs, only the terminal's past fraud does, known once its labels arrive: the
  label features with a delay reveal it;
- a compromised card: for ``CARD_COMPROMISE`` a third of its payments are five times its habit:
  the amount against the card's own window mean reveals it.

Column names come from the contract (its id, timestamp, label, entity keys and first numeric input),
so the example contract may rename them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from mlops.contract import DataContract

DEFAULT_START = datetime(2026, 4, 1, tzinfo=UTC)
LARGE_AMOUNT = 220.0
TERMINAL_COMPROMISE = timedelta(days=28)
CARD_COMPROMISE = timedelta(days=14)
TERMINALS_PER_CUSTOMER = 6
_DAY_S = 86_400
# Compromises per day, as shares of the terminals and the customers (about 1 % of payments are fraud).
_TERMINAL_COMPROMISE_RATE = 1 / 1_500
_CARD_COMPROMISE_RATE = 1 / 1_700


def generate_payments(n_rows: int, contract: DataContract, *, seed: int = 42, days: int = 120,
                      start: datetime = DEFAULT_START) -> pd.DataFrame:
    """``n_rows`` payments over ``days`` days, sorted by time, with the contract's column names."""
    rng = np.random.default_rng(seed)
    n_customers = max(20, round(n_rows / (days * 2.0)))
    n_terminals = max(20, n_customers * 2)
    habit = rng.uniform(5, 100, n_customers)
    per_day = rng.uniform(0, 4, n_customers)
    # Slightly more than asked, then n_rows of them drawn at random: every day stays covered.
    scale = n_rows * 1.05 / (per_day.sum() * days)
    counts = rng.poisson(per_day[:, None] * scale, (n_customers, days))
    customer = np.repeat(np.repeat(np.arange(n_customers), days), counts.ravel())
    day = np.repeat(np.tile(np.arange(days), n_customers), counts.ravel())
    keep = np.sort(rng.choice(len(customer), size=min(n_rows, len(customer)), replace=False))
    customer, day = customer[keep], day[keep]
    seconds = np.round(rng.normal(_DAY_S / 2, 20_000, len(customer))) % _DAY_S
    moment = day * _DAY_S + seconds
    amount = np.abs(rng.normal(habit[customer], habit[customer] / 2))
    own_terminals = rng.integers(0, n_terminals, (n_customers, TERMINALS_PER_CUSTOMER))
    terminal = own_terminals[customer, rng.integers(0, TERMINALS_PER_CUSTOMER, len(customer))]

    fraud = amount > LARGE_AMOUNT
    fraud |= _compromised(rng, terminal, moment, n_terminals, days, _TERMINAL_COMPROMISE_RATE, TERMINAL_COMPROMISE)
    stolen = _compromised(rng, customer, moment, n_customers, days, _CARD_COMPROMISE_RATE, CARD_COMPROMISE)
    stolen &= rng.random(len(customer)) < 1 / 3
    amount = np.where(stolen, amount * 5, amount)
    fraud |= stolen

    order = np.argsort(moment, kind="stable")
    return _frame(contract, start, moment[order], customer[order], terminal[order],
                  np.clip(np.round(amount[order], 2), 0.01, None), fraud[order])


def _compromised(rng: np.random.Generator, owner: np.ndarray, moment: np.ndarray, n_owners: int, days: int,
                 rate: float, duration: timedelta) -> np.ndarray:
    """Payments of an owner (terminal, card) inside one of its compromise periods, each starting at
    midnight of a day on which the owner was drawn."""
    victims = rng.random((days, n_owners)) < rate
    start_day, victim = np.nonzero(victims)
    # The latest compromise of the payment's owner that began at or before it (owners sorted apart).
    horizon = float(days + 1) * _DAY_S
    starts = np.sort(victim * horizon + start_day * float(_DAY_S))
    if starts.size == 0:  # a small data set over few owners can draw no compromise at all
        return np.zeros(len(owner), dtype=bool)
    keyed = owner * horizon + moment
    latest = np.searchsorted(starts, keyed, side="right") - 1
    found = latest >= 0
    began = starts[np.maximum(latest, 0)]
    hit: np.ndarray = found & (began // horizon == owner) & (keyed - began < duration.total_seconds())
    return hit


def _frame(contract: DataContract, start: datetime, moment: np.ndarray, customer: np.ndarray,
           terminal: np.ndarray, amount: np.ndarray, fraud: np.ndarray) -> pd.DataFrame:
    customer_key, terminal_key = (e.join_key for e in contract.entities[:2])
    times = pd.Timestamp(start) + pd.to_timedelta(moment, unit="s")
    return pd.DataFrame({
        contract.id_column: np.arange(len(moment), dtype=np.int64),
        contract.timestamp_column: times,
        customer_key: customer.astype(np.int64),
        terminal_key: terminal.astype(np.int64),
        contract.model_inputs.numeric[0].name: amount,
        contract.label_column: fraud.astype(np.int64),
    })


def write_payments(out: Path, n_rows: int, contract: DataContract, *, seed: int = 42) -> float:
    """Write :func:`generate_payments` to ``out`` (.parquet or .csv); returns the fraud share."""
    frame = generate_payments(n_rows, contract, seed=seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".csv":
        frame.to_csv(out, index=False)
    else:
        frame.to_parquet(out, index=False)
    return float(frame[contract.label_column].mean())
