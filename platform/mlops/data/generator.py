"""Seeded synthetic card transactions with learnable fraud patterns and named scenarios.

Fraud arrives in bursts on compromised cards: several transactions within an hour, amounts far
above the customer's usual spend, risky merchant categories, online channel, foreign countries.
So the rolling features (velocity, amount vs. the customer's mean) carry real signal, and the
raw fields carry some. Drift scenarios shift one aspect of the data for monitoring to detect;
``night_fraud`` hides fraud in everyday-looking single transactions at night, so only the time
of day gives it away.

Column names, categories and the amount range come from the data contract (the bundled one by
default); the generator only knows which of those categories play which role in fraud. The draws
are numbers and vocabulary codes (vectorized numpy); text is made per chunk, so
:func:`write_transactions` writes ten million rows with memory for the draws alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mlops.contract import DataContract, load_contract
from mlops.contracts import BUNDLED_CONTRACT

Scenario = Literal["none", "amount_inflation", "online_shift", "fraud_surge", "new_countries", "night_fraud",
                   "new_merchant_category"]
SCENARIOS: tuple[str, ...] = get_args(Scenario)

# Roles in the fraud patterns; a contract category not named here is an ordinary one.
RISKY_CATEGORIES = ("electronics", "gift_cards", "travel")
RISKY_COUNTRIES = ("NG", "RU", "CN", "BR", "MX", "IN")
_LEGIT_CHANNEL_WEIGHTS = {"pos": 0.45, "online": 0.25, "atm": 0.05, "contactless": 0.25}
_FRAUD_CHANNEL_WEIGHTS = {"pos": 0.1, "online": 0.75, "atm": 0.1, "contactless": 0.05}
_OTHER_CHANNEL_WEIGHT = 0.05
# Columns the generator fills besides the contract's id, timestamp, label and entity keys.
_VALUE_COLUMNS = ("amount", "merchant_category", "channel", "country")
# A category the contract does not list: the new_merchant_category scenario moves merchants into it.
NEW_CATEGORY = "crypto_exchange"
DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
CHUNK_ROWS = 1_000_000  # rows made into text and written at a time by write_transactions

# night_fraud: legitimate use follows the day (weights per UTC hour, about 1.7 % in 00:00-05:00);
# most fraud happens in NIGHT_HOURS.
_DAYTIME_PROFILE = np.array([0.3, 0.2, 0.15, 0.15, 0.2, 0.4, 1, 2, 3, 4, 4, 4,
                             5, 4, 4, 4, 4, 4, 4, 4, 3, 2, 1.5, 0.8])
NIGHT_HOURS = (0, 5)
NIGHT_FRAUD_SHARE = 0.9


@dataclass(frozen=True)
class _Vocabulary:
    """What the contract allows, split into the roles the fraud patterns use."""

    categories: tuple[str, ...]
    risky_categories: tuple[str, ...]
    channels: tuple[str, ...]
    legit_channel_p: np.ndarray
    fraud_channel_p: np.ndarray
    home_countries: tuple[str, ...]
    risky_countries: tuple[str, ...]
    amount_range: tuple[float, float]
    countries: tuple[str, ...]

    def codes(self, names: tuple[str, ...], universe: tuple[str, ...]) -> np.ndarray:
        """Positions of ``names`` in ``universe``: drawing a position draws the name (numpy's choice is the same)."""
        return np.array([universe.index(n) for n in names], np.int64)

    @property
    def channel_names(self) -> tuple[str, ...]:
        """The contract's channels, and "online" (the online_shift scenario's target) when it lacks it."""
        return self.channels if "online" in self.channels else (*self.channels, "online")

    @property
    def category_names(self) -> tuple[str, ...]:
        return (*self.categories, NEW_CATEGORY)

    @classmethod
    def of(cls, contract: DataContract) -> _Vocabulary:
        names = {c.name for c in contract.columns}
        missing = [n for n in _VALUE_COLUMNS if n not in names]
        if missing:
            raise ValueError(f"contract {contract.name!r} lacks the columns the generator writes: {missing}")

        def categories(name: str) -> tuple[str, ...]:
            values = contract.column(name).categories
            if not values:
                raise ValueError(f"contract column {name!r} must be a category column for the generator")
            return values

        def weights(table: dict[str, float]) -> np.ndarray:
            raw = np.array([table.get(c, _OTHER_CHANNEL_WEIGHT) for c in channels])
            return raw if raw.sum() == 1.0 else raw / raw.sum()

        merchant_categories, channels, countries = (categories(n) for n in _VALUE_COLUMNS[1:])
        risky_countries = tuple(c for c in RISKY_COUNTRIES if c in countries)
        home_countries = tuple(c for c in countries if c not in risky_countries)
        if not home_countries:
            raise ValueError("the contract's countries are all risky ones; the generator needs home countries")
        amount = contract.column("amount")
        return cls(
            categories=merchant_categories,
            risky_categories=tuple(c for c in RISKY_CATEGORIES if c in merchant_categories),
            channels=channels,
            legit_channel_p=weights(_LEGIT_CHANNEL_WEIGHTS),
            fraud_channel_p=weights(_FRAUD_CHANNEL_WEIGHTS),
            home_countries=home_countries,
            risky_countries=risky_countries,
            amount_range=(amount.min if amount.min is not None else 0.01,
                          amount.max if amount.max is not None else np.inf),
            countries=countries,
        )


@dataclass(frozen=True)
class _Population:
    """The customers and merchants of one generated dataset (countries and categories as vocabulary codes)."""

    home: np.ndarray
    spend: np.ndarray
    activity_p: np.ndarray
    merchant_category: np.ndarray

    @property
    def n_merchants(self) -> int:
        return len(self.merchant_category)


def generate_transactions(
    n_rows: int,
    *,
    seed: int = 42,
    fraud_rate: float = 0.015,
    days: int = 60,
    scenario: Scenario = "none",
    start: datetime = DEFAULT_START,
    contract: DataContract | None = None,
    population_rows: int | None = None,
) -> pd.DataFrame:
    """Return ``n_rows`` transactions sorted by time, with the contract's columns (bundled contract by default).

    The customers and merchants are those of a dataset of ``population_rows`` rows with the same seed
    (default ``n_rows``): a longer stream of a smaller dataset's population, each customer as active a
    day as there, is what follows that dataset (the population grows with the rows otherwise).
    """
    draws = _Draws.of(n_rows, seed=seed, fraud_rate=fraud_rate, days=days, scenario=scenario,
                      contract=contract or load_contract(BUNDLED_CONTRACT), population_rows=population_rows)
    return draws.rows(0, n_rows, start)


def write_transactions(
    out: Path,
    n_rows: int,
    *,
    seed: int = 42,
    fraud_rate: float = 0.015,
    scenario: Scenario = "none",
    contract: DataContract | None = None,
    chunk_rows: int = CHUNK_ROWS,
) -> float:
    """Write :func:`generate_transactions`' rows to ``out`` (.parquet or .csv) in chunks; returns the fraud share.

    Only the draws (a few numbers a row) are held for the whole set; the rows' text is made and
    written one chunk at a time, so memory grows by bytes, not by Python strings, per row.
    """
    draws = _Draws.of(n_rows, seed=seed, fraud_rate=fraud_rate, days=60, scenario=scenario,
                      contract=contract or load_contract(BUNDLED_CONTRACT))
    out.parent.mkdir(parents=True, exist_ok=True)
    writer: pq.ParquetWriter | None = None
    try:
        for begin in range(0, n_rows, chunk_rows):
            chunk = draws.rows(begin, min(begin + chunk_rows, n_rows), DEFAULT_START)
            if out.suffix == ".csv":
                chunk.to_csv(out, index=False, header=begin == 0, mode="w" if begin == 0 else "a")
                continue
            table = pa.Table.from_pandas(chunk, preserve_index=False)
            writer = writer or pq.ParquetWriter(out, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return float(draws.is_fraud.mean())


@dataclass(frozen=True)
class _Draws:
    """Every random draw of one dataset, sorted by time: numbers and vocabulary codes, no text."""

    contract: DataContract
    vocab: _Vocabulary
    customer: np.ndarray
    merchant: np.ndarray
    micros: np.ndarray
    amount: np.ndarray
    merchant_category: np.ndarray
    channel: np.ndarray
    country: np.ndarray
    is_fraud: np.ndarray

    @classmethod
    def of(cls, n_rows: int, *, seed: int, fraud_rate: float, days: int, scenario: Scenario,
           contract: DataContract, population_rows: int | None = None) -> _Draws:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
        if n_rows < 100:
            raise ValueError("n_rows must be at least 100")
        if scenario == "fraud_surge":
            fraud_rate *= 3
        if not 0 <= fraud_rate <= 0.3:
            raise ValueError(f"fraud rate {fraud_rate:g} (after the scenario) must be between 0 and 0.3")
        vocab = _Vocabulary.of(contract)
        rng = np.random.default_rng(seed)
        n_customers = max(50, (population_rows or n_rows) // 25)
        n_merchants = max(20, (population_rows or n_rows) // 150)
        home = vocab.codes(vocab.home_countries, vocab.countries)
        cust_home = home[rng.choice(len(home), size=n_customers)]
        cust_spend = rng.lognormal(mean=3.6, sigma=0.6, size=n_customers)
        cust_activity = rng.gamma(2.0, 1.0, size=n_customers)
        people = _Population(home=cust_home, spend=cust_spend, activity_p=cust_activity / cust_activity.sum(),
                             merchant_category=rng.choice(len(vocab.categories), size=n_merchants))
        n_fraud_target = round(n_rows * fraud_rate)
        if scenario == "night_fraud":
            frame = _night_fraud(rng, people, vocab, n_rows, n_fraud_target, days)
        else:
            frame = _burst_fraud(rng, people, vocab, n_rows, n_fraud_target, days * 86_400)
        frame = _apply_scenario(frame, scenario, rng, vocab)
        if scenario == "new_merchant_category":
            people.merchant_category[rng.random(people.n_merchants) < 0.2] = len(vocab.categories)
        frame = frame.sort_values(["t", "customer_idx"], kind="stable")
        return cls(contract=contract, vocab=vocab, customer=frame["customer_idx"].to_numpy(),
                   merchant=frame["merchant_idx"].to_numpy(),
                   micros=np.floor(frame["t"].to_numpy() * 1e6).astype("int64"),
                   amount=np.clip(frame["amount"].to_numpy(), *vocab.amount_range).round(2),
                   merchant_category=people.merchant_category, channel=frame["channel"].to_numpy(),
                   country=frame["country"].to_numpy(), is_fraud=frame["is_fraud"].to_numpy())

    def rows(self, begin: int, end: int, start: datetime) -> pd.DataFrame:
        """Rows ``begin``..``end`` (in time order) with the contract's columns and text."""
        contract, part = self.contract, slice(begin, end)
        values = {
            contract.id_column: _labels("T", np.arange(begin, end), 9),
            contract.entity("customer").join_key: _labels("C", self.customer[part], 6),
            contract.entity("merchant").join_key: _labels("M", self.merchant[part], 5),
            contract.timestamp_column: pd.Timestamp(start) + pd.to_timedelta(self.micros[part], unit="us"),
            "amount": self.amount[part],
            "merchant_category": _names(self.vocab.category_names, self.merchant_category[self.merchant[part]]),
            "channel": _names(self.vocab.channel_names, self.channel[part]),
            "country": _names(self.vocab.countries, self.country[part]),
            contract.label_column: self.is_fraud[part],
        }
        return pd.DataFrame({c.name: values[c.name] for c in contract.columns})


def _labels(prefix: str, numbers: np.ndarray, width: int) -> np.ndarray:
    """``prefix`` and each number zero-padded to ``width`` digits (as f"{prefix}{n:0{width}d}"), vectorized."""
    digits = pc.utf8_lpad(pa.array(numbers, pa.int64()).cast(pa.string()), width=width, padding="0")
    labelled: np.ndarray = pc.binary_join_element_wise(prefix, digits, "").to_numpy(zero_copy_only=False)
    return labelled


def _names(universe: tuple[str, ...], codes: np.ndarray) -> np.ndarray:
    picked: np.ndarray = np.array(universe, dtype=object)[codes]
    return picked


def _everyday(rng: np.random.Generator, people: _Population, vocab: _Vocabulary, customers: np.ndarray,
              times: np.ndarray) -> pd.DataFrame:
    """Ordinary spend of ``customers`` at ``times``: their usual amounts, home country, everyday channels."""
    n = len(customers)
    amount = people.spend[customers] * rng.lognormal(0.0, 0.5, size=n)
    merchant = rng.integers(0, people.n_merchants, size=n)
    channel = rng.choice(len(vocab.channels), size=n, p=vocab.legit_channel_p)
    abroad = rng.random(n) < 0.04
    travel = vocab.codes(vocab.home_countries + vocab.risky_countries[:2], vocab.countries)
    country = np.where(abroad, travel[rng.choice(len(travel), size=n)], people.home[customers])
    return pd.DataFrame({"customer_idx": customers, "merchant_idx": merchant, "t": times, "amount": amount,
                         "channel": channel, "country": country, "is_fraud": np.zeros(n, np.int64)})


def _burst_fraud(rng: np.random.Generator, people: _Population, vocab: _Vocabulary, n_rows: int,
                 n_fraud_target: int, span_s: int) -> pd.DataFrame:
    """Everyday spend at any time plus fraud bursts: several fast, large, risky-looking transactions."""
    burst_sizes: list[int] = []
    while sum(burst_sizes) < n_fraud_target:
        burst_sizes.append(int(rng.integers(2, 7)))
    if burst_sizes:
        burst_sizes[-1] -= sum(burst_sizes) - n_fraud_target
    burst_sizes = [b for b in burst_sizes if b > 0]
    n_fraud = sum(burst_sizes)
    n_legit = n_rows - n_fraud
    n_customers = len(people.spend)
    legit_cust = rng.choice(n_customers, size=n_legit, p=people.activity_p)
    legit = _everyday(rng, people, vocab, legit_cust, rng.uniform(0, span_s, size=n_legit))

    # One compromised card per burst, several fast transactions, risky shape (mostly).
    fraud_cust = np.repeat(rng.integers(0, n_customers, size=len(burst_sizes)), burst_sizes)
    burst_start = np.repeat(rng.uniform(0, span_s - 3_600, size=len(burst_sizes)), burst_sizes)
    fraud_t = burst_start + rng.uniform(0, 3_000, size=n_fraud)
    blends_in = np.repeat(rng.random(len(burst_sizes)) < 0.15, burst_sizes)
    fraud_amount = people.spend[fraud_cust] * np.where(
        blends_in, rng.lognormal(0.0, 0.5, size=n_fraud), rng.lognormal(1.6, 0.6, size=n_fraud))
    risky_categories = vocab.codes(vocab.risky_categories, vocab.categories)
    risky_merchants = np.flatnonzero(np.isin(people.merchant_category, risky_categories))
    fraud_merchant = np.where(
        blends_in | (rng.random(n_fraud) < 0.2),
        rng.integers(0, people.n_merchants, size=n_fraud),
        rng.choice(risky_merchants, size=n_fraud) if risky_merchants.size else 0)
    fraud_channel = np.where(blends_in, rng.choice(len(vocab.channels), size=n_fraud),
                             rng.choice(len(vocab.channels), size=n_fraud, p=vocab.fraud_channel_p))
    stays_home = blends_in | (rng.random(n_fraud) < 0.35)
    abroad = vocab.codes(vocab.risky_countries or vocab.home_countries, vocab.countries)
    foreign = abroad[rng.choice(len(abroad), size=n_fraud)]
    fraud_country = np.where(stays_home, people.home[fraud_cust], foreign)
    fraud = pd.DataFrame({"customer_idx": fraud_cust, "merchant_idx": fraud_merchant, "t": fraud_t,
                          "amount": fraud_amount, "channel": fraud_channel, "country": fraud_country,
                          "is_fraud": np.ones(n_fraud, np.int64)})
    return pd.concat([legit, fraud], ignore_index=True)


def _night_fraud(rng: np.random.Generator, people: _Population, vocab: _Vocabulary, n_rows: int,
                 n_fraud: int, days: int) -> pd.DataFrame:
    """Legitimate use by day; fraud as single everyday-looking transactions, mostly at night.

    Fraud cards are drawn like legitimate ones (by activity) and each fraud is one transaction of
    the customer's usual amount, merchant, channel and country: nothing but the hour stands out.
    """
    n_legit = n_rows - n_fraud
    n_customers = len(people.spend)
    hour_p = _DAYTIME_PROFILE / _DAYTIME_PROFILE.sum()

    def daytime(n: int) -> np.ndarray:
        hours = rng.choice(24, size=n, p=hour_p)
        return rng.integers(0, days, size=n) * 86_400.0 + hours * 3_600.0 + rng.uniform(0, 3_600, size=n)

    legit_cust = rng.choice(n_customers, size=n_legit, p=people.activity_p)
    legit = _everyday(rng, people, vocab, legit_cust, daytime(n_legit))
    fraud_cust = rng.choice(n_customers, size=n_fraud, p=people.activity_p)
    night_start, night_end = NIGHT_HOURS
    at_night = rng.random(n_fraud) < NIGHT_FRAUD_SHARE
    night_t = rng.integers(0, days, size=n_fraud) * 86_400.0 + rng.uniform(night_start * 3_600, night_end * 3_600,
                                                                           size=n_fraud)
    fraud = _everyday(rng, people, vocab, fraud_cust, np.where(at_night, night_t, daytime(n_fraud)))
    fraud["is_fraud"] = 1
    return pd.concat([legit, fraud], ignore_index=True)


def _apply_scenario(frame: pd.DataFrame, scenario: Scenario, rng: np.random.Generator,
                    vocab: _Vocabulary) -> pd.DataFrame:
    frame = frame.copy()
    if scenario == "amount_inflation":
        frame["amount"] = frame["amount"] * 1.6
    elif scenario == "online_shift":
        move = rng.random(len(frame)) < 0.4
        frame.loc[move, "channel"] = vocab.channel_names.index("online")
    elif scenario == "new_countries":
        move = rng.random(len(frame)) < 0.25
        risky = vocab.codes(vocab.risky_countries, vocab.countries)
        frame.loc[move, "country"] = risky[rng.choice(len(risky), size=int(move.sum()))]
    return frame
