"""Seeded synthetic card transactions with learnable fraud patterns and named drift scenarios.

Fraud arrives in bursts on compromised cards: several transactions within an hour, amounts far
above the customer's usual spend, risky merchant categories, online channel, foreign countries.
So the rolling features (velocity, amount vs. the customer's mean) carry real signal, and the
raw fields carry some. Drift scenarios shift one aspect of the data for monitoring to detect.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal, get_args

import numpy as np
import pandas as pd

Scenario = Literal["none", "amount_inflation", "online_shift", "fraud_surge", "new_countries",
                   "new_merchant_category"]
SCENARIOS: tuple[str, ...] = get_args(Scenario)

CATEGORIES = ("grocery", "restaurant", "fuel", "travel", "electronics", "fashion",
              "entertainment", "gift_cards", "health", "utilities")
RISKY_CATEGORIES = ("electronics", "gift_cards", "travel")
CHANNELS = ("pos", "online", "atm", "contactless")
HOME_COUNTRIES = ("US", "GB", "DE", "FR", "ES", "IT", "NL", "CA")
RISKY_COUNTRIES = ("NG", "RU", "CN", "BR", "MX", "IN")
# A category the contract does not list: the new_merchant_category scenario moves merchants into it.
NEW_CATEGORY = "crypto_exchange"
DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


def generate_transactions(
    n_rows: int,
    *,
    seed: int = 42,
    fraud_rate: float = 0.015,
    days: int = 60,
    scenario: Scenario = "none",
    start: datetime = DEFAULT_START,
) -> pd.DataFrame:
    """Return ``n_rows`` transactions sorted by time, columns as in ``contracts/fraud.yaml``."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
    if n_rows < 100:
        raise ValueError("n_rows must be at least 100")
    if scenario == "fraud_surge":
        fraud_rate *= 3
    if not 0 <= fraud_rate <= 0.3:
        raise ValueError(f"fraud rate {fraud_rate:g} (after the scenario) must be between 0 and 0.3")
    rng = np.random.default_rng(seed)
    n_customers = max(50, n_rows // 25)
    n_merchants = max(20, n_rows // 150)
    cust_home = rng.choice(HOME_COUNTRIES, size=n_customers)
    cust_spend = rng.lognormal(mean=3.6, sigma=0.6, size=n_customers)
    cust_activity = rng.gamma(2.0, 1.0, size=n_customers)
    merch_category = rng.choice(CATEGORIES, size=n_merchants).astype(object)
    span_s = days * 86_400

    n_fraud_target = round(n_rows * fraud_rate)
    burst_sizes: list[int] = []
    while sum(burst_sizes) < n_fraud_target:
        burst_sizes.append(int(rng.integers(2, 7)))
    if burst_sizes:
        burst_sizes[-1] -= sum(burst_sizes) - n_fraud_target
    burst_sizes = [b for b in burst_sizes if b > 0]
    n_fraud = sum(burst_sizes)
    n_legit = n_rows - n_fraud

    # Legitimate spend: the customer's usual amounts, home country, everyday channels.
    legit_cust = rng.choice(n_customers, size=n_legit, p=cust_activity / cust_activity.sum())
    legit_t = rng.uniform(0, span_s, size=n_legit)
    legit_amount = cust_spend[legit_cust] * rng.lognormal(0.0, 0.5, size=n_legit)
    legit_merchant = rng.integers(0, n_merchants, size=n_legit)
    legit_channel = rng.choice(CHANNELS, size=n_legit, p=[0.45, 0.25, 0.05, 0.25])
    abroad = rng.random(n_legit) < 0.04
    legit_country = np.where(abroad, rng.choice(HOME_COUNTRIES + RISKY_COUNTRIES[:2], size=n_legit),
                             cust_home[legit_cust])

    # Fraud bursts: one compromised card, several fast transactions, risky shape (mostly).
    fraud_cust = np.repeat(rng.integers(0, n_customers, size=len(burst_sizes)), burst_sizes)
    burst_start = np.repeat(rng.uniform(0, span_s - 3_600, size=len(burst_sizes)), burst_sizes)
    fraud_t = burst_start + rng.uniform(0, 3_000, size=n_fraud)
    blends_in = np.repeat(rng.random(len(burst_sizes)) < 0.15, burst_sizes)
    fraud_amount = cust_spend[fraud_cust] * np.where(
        blends_in, rng.lognormal(0.0, 0.5, size=n_fraud), rng.lognormal(1.6, 0.6, size=n_fraud))
    risky_merchants = np.flatnonzero(np.isin(merch_category, RISKY_CATEGORIES))
    fraud_merchant = np.where(
        blends_in | (rng.random(n_fraud) < 0.2),
        rng.integers(0, n_merchants, size=n_fraud),
        rng.choice(risky_merchants, size=n_fraud) if risky_merchants.size else 0)
    fraud_channel = np.where(blends_in, rng.choice(CHANNELS, size=n_fraud),
                             rng.choice(CHANNELS, size=n_fraud, p=[0.1, 0.75, 0.1, 0.05]))
    fraud_country = np.where(blends_in | (rng.random(n_fraud) < 0.35), cust_home[fraud_cust],
                             rng.choice(RISKY_COUNTRIES, size=n_fraud))

    frame = pd.DataFrame({
        "customer_idx": np.concatenate([legit_cust, fraud_cust]),
        "merchant_idx": np.concatenate([legit_merchant, fraud_merchant]),
        "t": np.concatenate([legit_t, fraud_t]),
        "amount": np.concatenate([legit_amount, fraud_amount]),
        "channel": np.concatenate([legit_channel, fraud_channel]),
        "country": np.concatenate([legit_country, fraud_country]),
        "is_fraud": np.concatenate([np.zeros(n_legit, np.int64), np.ones(n_fraud, np.int64)]),
    })
    frame = _apply_scenario(frame, scenario, rng)
    if scenario == "new_merchant_category":
        merch_category[rng.random(n_merchants) < 0.2] = NEW_CATEGORY
    frame = frame.sort_values(["t", "customer_idx"], kind="stable").reset_index(drop=True)
    seconds = np.floor(frame["t"].to_numpy() * 1e6).astype("int64")
    return pd.DataFrame({
        "transaction_id": [f"T{i:09d}" for i in range(len(frame))],
        "customer_id": [f"C{i:06d}" for i in frame["customer_idx"]],
        "merchant_id": [f"M{i:05d}" for i in frame["merchant_idx"]],
        "event_timestamp": pd.Timestamp(start) + pd.to_timedelta(seconds, unit="us"),
        "amount": np.clip(frame["amount"].to_numpy(), 0.01, 50_000).round(2),
        "merchant_category": merch_category[frame["merchant_idx"]],
        "channel": pd.Categorical(frame["channel"], categories=CHANNELS),
        "country": pd.Categorical(frame["country"], categories=HOME_COUNTRIES + RISKY_COUNTRIES),
        "is_fraud": frame["is_fraud"].to_numpy(),
    }).astype({"merchant_category": str, "channel": str, "country": str})


def _apply_scenario(frame: pd.DataFrame, scenario: Scenario, rng: np.random.Generator) -> pd.DataFrame:
    frame = frame.copy()
    if scenario == "amount_inflation":
        frame["amount"] = frame["amount"] * 1.6
    elif scenario == "online_shift":
        move = rng.random(len(frame)) < 0.4
        frame.loc[move, "channel"] = "online"
    elif scenario == "new_countries":
        move = rng.random(len(frame)) < 0.25
        frame.loc[move, "country"] = rng.choice(RISKY_COUNTRIES, size=int(move.sum()))
    return frame
