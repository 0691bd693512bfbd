"""The synthetic generator: deterministic per seed, on contract, with a real fraud signal and drift."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from pandas.testing import assert_frame_equal, assert_series_equal
from scipy.stats import ks_2samp
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import average_precision_score

from mlops.contract import DataContract
from mlops.data.generator import (
    NIGHT_HOURS,
    RISKY_COUNTRIES,
    SCENARIOS,
    Scenario,
    generate_transactions,
    write_transactions,
)

N = 20_000
SEED = 3



@pytest.fixture(scope="module")
def base() -> pd.DataFrame:
    frame: pd.DataFrame = generate_transactions(N, seed=SEED)
    return frame


def _drifted(scenario: Scenario) -> pd.DataFrame:
    frame: pd.DataFrame = generate_transactions(N, seed=SEED, scenario=scenario)
    return frame


@pytest.mark.unit
def test_same_seed_gives_identical_frame(base: pd.DataFrame) -> None:
    assert_frame_equal(generate_transactions(N, seed=SEED), base)


@pytest.mark.unit
def test_different_seed_gives_different_frame(base: pd.DataFrame) -> None:
    other = generate_transactions(N, seed=SEED + 1)
    assert not other["amount"].equals(base["amount"])
    assert not other["customer_id"].equals(base["customer_id"])
    assert not other["event_timestamp"].equals(base["event_timestamp"])


@pytest.mark.unit
@pytest.mark.parametrize("rate", [0.005, 0.015, 0.05])
def test_fraud_rate_close_to_requested(rate: float) -> None:
    frame = generate_transactions(10_000, seed=11, fraud_rate=rate)
    assert len(frame) == 10_000
    assert abs(frame["is_fraud"].mean() - rate) < 0.001


@pytest.mark.unit
def test_generated_values_satisfy_the_contract(base: pd.DataFrame, contract: DataContract) -> None:
    assert list(base.columns) == [c.name for c in contract.columns]
    assert len(base) == N
    for column in contract.columns:
        values = base[column.name]
        assert values.notna().all(), column.name
        if column.categories is not None:
            assert set(values.unique()) <= set(column.categories), column.name
        if column.min is not None:
            assert values.min() >= column.min, column.name
        if column.max is not None:
            assert values.max() <= column.max, column.name
    assert set(base["is_fraud"].unique()) == {0, 1}
    assert str(base["event_timestamp"].dt.tz) == "UTC"
    assert base["event_timestamp"].is_monotonic_increasing
    assert base["transaction_id"].is_unique
    # Amounts are cents.
    assert ((base["amount"] * 100).round() - base["amount"] * 100).abs().max() < 1e-6


@pytest.mark.unit
def test_timestamps_span_requested_days() -> None:
    start = pd.Timestamp("2025-03-01", tz="UTC")
    frame = generate_transactions(2_000, seed=4, days=10, start=start.to_pydatetime())
    assert frame["event_timestamp"].min() >= start
    assert frame["event_timestamp"].max() < start + pd.Timedelta(days=10)
    assert frame["event_timestamp"].max() - frame["event_timestamp"].min() > pd.Timedelta(days=9)


@pytest.mark.unit
def test_frauds_are_larger_more_online_and_from_riskier_countries(base: pd.DataFrame) -> None:
    fraud = base[base["is_fraud"] == 1]
    legit = base[base["is_fraud"] == 0]
    assert fraud["amount"].median() > 2.5 * legit["amount"].median()
    fraud_online = (fraud["channel"] == "online").mean()
    legit_online = (legit["channel"] == "online").mean()
    assert fraud_online > legit_online + 0.2
    fraud_risky = fraud["country"].isin(RISKY_COUNTRIES).mean()
    legit_risky = legit["country"].isin(RISKY_COUNTRIES).mean()
    assert fraud_risky > legit_risky + 0.2


@pytest.mark.unit
def test_fraud_comes_in_bursts_per_customer(base: pd.DataFrame) -> None:
    fraud = base[base["is_fraud"] == 1].sort_values(["customer_id", "event_timestamp"])
    gap = fraud.groupby("customer_id")["event_timestamp"].diff()
    next_gap = -fraud.groupby("customer_id")["event_timestamp"].diff(-1)
    # A fraud transaction nearly always has another fraud on the same card within the hour.
    in_burst = (gap <= pd.Timedelta(hours=1)) | (next_gap <= pd.Timedelta(hours=1))
    assert in_burst.mean() > 0.95


@pytest.mark.unit
def test_amount_inflation_scales_amounts_only(base: pd.DataFrame) -> None:
    drifted = _drifted("amount_inflation")
    ratio = drifted["amount"].sum() / base["amount"].sum()
    assert ratio == pytest.approx(1.6, rel=0.01)
    assert drifted["amount"].median() / base["amount"].median() == pytest.approx(1.6, rel=0.01)
    assert_frame_equal(drifted.drop(columns="amount"), base.drop(columns="amount"))


@pytest.mark.unit
def test_online_shift_raises_online_share(base: pd.DataFrame) -> None:
    drifted = _drifted("online_shift")
    before = (base["channel"] == "online").mean()
    after = (drifted["channel"] == "online").mean()
    # 40% of rows move to online: expected share = before + 0.4 * (1 - before).
    assert after == pytest.approx(before + 0.4 * (1 - before), abs=0.02)
    assert_series_equal(drifted["amount"], base["amount"])


@pytest.mark.unit
def test_fraud_surge_raises_fraud_rate(base: pd.DataFrame) -> None:
    drifted = _drifted("fraud_surge")
    assert drifted["is_fraud"].mean() == pytest.approx(3 * base["is_fraud"].mean(), rel=0.05)
    assert len(drifted) == N


@pytest.mark.unit
def test_new_countries_raises_risky_country_share(base: pd.DataFrame) -> None:
    drifted = _drifted("new_countries")
    before = base["country"].isin(RISKY_COUNTRIES).mean()
    after = drifted["country"].isin(RISKY_COUNTRIES).mean()
    assert before < 0.05
    assert after > before + 0.2
    assert_series_equal(drifted["amount"], base["amount"])


@pytest.mark.unit
def test_none_scenario_is_the_default(base: pd.DataFrame) -> None:
    assert "none" in SCENARIOS
    assert_frame_equal(_drifted("none"), base)


@pytest.mark.unit
def test_unknown_scenario_raises_value_error() -> None:
    with pytest.raises(ValueError, match="unknown scenario 'meteor'"):
        generate_transactions(1_000, scenario="meteor")  # type: ignore[arg-type]


@pytest.mark.unit
def test_too_few_rows_raises_value_error() -> None:
    with pytest.raises(ValueError, match="at least 100"):
        generate_transactions(99)


@pytest.mark.unit
@pytest.mark.parametrize(("rate", "scenario"), [(-0.01, "none"), (0.2, "fraud_surge")])
def test_impossible_fraud_rates_are_refused(rate: float, scenario: Scenario) -> None:
    with pytest.raises(ValueError, match="fraud rate"):
        generate_transactions(500, fraud_rate=rate, scenario=scenario)


@pytest.fixture(scope="module")
def night() -> pd.DataFrame:
    frame: pd.DataFrame = generate_transactions(N, seed=SEED, scenario="night_fraud")
    return frame


def _at_night(frame: pd.DataFrame) -> pd.Series:
    hour: pd.Series = frame["event_timestamp"].dt.hour
    return hour.between(NIGHT_HOURS[0], NIGHT_HOURS[1], inclusive="left")


def _share_gap(fraud: pd.Series, legit: pd.Series) -> float:
    """Total variation distance between two categorical distributions."""
    return float(0.5 * fraud.value_counts(normalize=True).sub(legit.value_counts(normalize=True), fill_value=0)
                 .abs().sum())


@pytest.mark.unit
def test_night_fraud_happens_at_night_and_legit_use_by_day(night: pd.DataFrame, contract: DataContract) -> None:
    fraud = night["is_fraud"] == 1
    assert night["is_fraud"].mean() == pytest.approx(0.015, abs=0.001)
    assert _at_night(night)[fraud].mean() > 0.85
    assert _at_night(night)[~fraud].mean() < 0.03
    assert list(night.columns) == [c.name for c in contract.columns]
    assert night["event_timestamp"].is_monotonic_increasing


@pytest.mark.unit
def test_night_fraud_looks_like_everyday_spend(night: pd.DataFrame) -> None:
    fraud, legit = night[night["is_fraud"] == 1], night[night["is_fraud"] == 0]
    assert ks_2samp(fraud["amount"], legit["amount"]).statistic < 0.1
    assert fraud["amount"].median() / legit["amount"].median() == pytest.approx(1.0, abs=0.15)
    for column in ("merchant_category", "channel", "country"):
        assert _share_gap(fraud[column], legit[column]) < 0.1, column
    # Single transactions, not bursts: almost no fraud has another fraud on the card within the hour.
    ordered = fraud.sort_values(["customer_id", "event_timestamp"])
    gap = ordered.groupby("customer_id")["event_timestamp"].diff()
    assert (gap <= pd.Timedelta(hours=1)).mean() < 0.02


@pytest.mark.integration
def test_night_fraud_is_learnable_only_from_the_hour(night: pd.DataFrame) -> None:
    raw = pd.DataFrame({"amount": night["amount"], **{c: night[c].astype("category")
                                                    for c in ("merchant_category", "channel", "country")}})
    label = night["is_fraud"]
    cut = int(len(night) * 0.7)

    def test_pr_auc(features: pd.DataFrame) -> float:
        model = HistGradientBoostingClassifier(categorical_features="from_dtype", max_iter=50, random_state=0)
        model.fit(features.iloc[:cut], label.iloc[:cut])
        return float(average_precision_score(label.iloc[cut:], model.predict_proba(features.iloc[cut:])[:, 1]))

    blind = test_pr_auc(raw)
    with_hour = test_pr_auc(raw.assign(hour=night["event_timestamp"].dt.hour))
    base_rate = label.iloc[cut:].mean()
    assert blind < 2 * base_rate
    assert with_hour > 10 * base_rate
    assert with_hour > 1.5 * blind


@pytest.mark.unit
def test_categories_and_ranges_come_from_the_contract(contract: DataContract) -> None:
    def reshaped(name: str, **update: object) -> object:
        return contract.column(name).model_copy(update=update)

    changed = {
        "merchant_category": reshaped("merchant_category", categories=("grocery", "fuel", "casino")),
        "channel": reshaped("channel", categories=("pos", "online", "moto")),
        "amount": reshaped("amount", min=1.0, max=120.0),
    }
    narrow = contract.model_copy(update={"columns": tuple(changed.get(c.name, c) for c in contract.columns)})
    frame = generate_transactions(5_000, seed=2, contract=narrow)
    assert set(frame["merchant_category"]) == {"grocery", "fuel", "casino"}
    assert set(frame["channel"]) == {"pos", "online", "moto"}
    assert frame["amount"].between(1.0, 120.0).all()
    assert frame["amount"].max() == 120.0  # clipped at the contract's range, not the generator's
    # A narrower contract changes the vocabulary, not the fraud the generator plants (1.5 % by default).
    assert frame["is_fraud"].mean() == pytest.approx(0.015, abs=0.002)


@pytest.mark.unit
def test_a_contract_without_the_generated_columns_is_refused(contract: DataContract) -> None:
    thin = contract.model_copy(update={"columns": tuple(c for c in contract.columns if c.name != "channel")})
    with pytest.raises(ValueError, match=r"lacks the columns the generator writes: \['channel'\]"):
        generate_transactions(500, contract=thin)


@pytest.mark.unit
def test_scenarios_other_than_night_fraud_keep_the_time_of_day_flat(base: pd.DataFrame) -> None:
    hours = np.bincount(base["event_timestamp"].dt.hour, minlength=24) / len(base)
    assert hours.min() > 0.6 / 24


# SHA-256 (first 16 hex digits) of generate_transactions(3000, seed=11, scenario=...).to_csv(index=False),
# as the generator gave them before it drew vocabulary codes instead of names: the same seed, the same rows.
_PINNED_ROWS = {
    "none": "3b5f0393138e6818", "amount_inflation": "968ae90ee391ee84", "online_shift": "1e9c7162fb95fdf2",
    "fraud_surge": "fbb307e02fbf674a", "new_countries": "70c92183e10ed9a4", "night_fraud": "91cbe8b773a5a34b",
    "new_merchant_category": "513e85af65b0bb77",
}


@pytest.mark.unit
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_same_seed_gives_the_rows_it_always_gave(scenario: Scenario) -> None:
    frame = generate_transactions(3000, seed=11, scenario=scenario)
    assert hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest()[:16] == _PINNED_ROWS[scenario]


@pytest.mark.unit
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_writing_in_chunks_gives_the_generated_rows(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"tx{suffix}"
    share = write_transactions(out, 2500, seed=4, scenario="online_shift", chunk_rows=700)
    frame = generate_transactions(2500, seed=4, scenario="online_shift")
    if suffix == ".csv":
        assert out.read_text() == frame.to_csv(index=False)
    else:
        pd.testing.assert_frame_equal(pd.read_parquet(out), frame)
        assert pq.ParquetFile(out).metadata.num_row_groups == 4
    assert share == frame["is_fraud"].mean()


@pytest.mark.unit
def test_a_longer_stream_keeps_a_smaller_datasets_population() -> None:
    """population_rows: the customers and merchants of the smaller dataset (the same homes), each as
    active a day, so a longer stream is the traffic that follows it, not a larger population."""
    small = generate_transactions(3_000, seed=9, days=6)
    longer = generate_transactions(12_000, seed=9, days=24, population_rows=3_000)
    assert longer["customer_id"].nunique() <= small["customer_id"].nunique() + 10
    assert set(longer["merchant_id"]) == set(small["merchant_id"])
    legit = ~small["is_fraud"].astype(bool), ~longer["is_fraud"].astype(bool)
    homes = [frame[mask].groupby("customer_id")["country"].agg(lambda c: c.mode().iloc[0])
             for frame, mask in zip((small, longer), legit, strict=True)]
    shared = homes[0].index.intersection(homes[1].index)
    assert len(shared) >= 100
    assert (homes[0][shared] == homes[1][shared]).mean() > 0.95
    unpinned = generate_transactions(12_000, seed=9, days=24)
    assert unpinned["customer_id"].nunique() > 3 * small["customer_id"].nunique()
