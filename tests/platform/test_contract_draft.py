"""`mlops contract draft` / `check` in the core: a drafted contract loads, describes the data it was
drafted from (which then passes the check), keeps the source's id dtypes, and each planted problem
in a file is named on its own line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlops.contract import load_contract
from mlops.contract_check import check_data
from mlops.contract_draft import draft_contract
from mlops.contracts import BUNDLED_CONTRACT
from mlops.data.generator import generate_transactions, write_transactions
from mlops.errors import InputError

pytestmark = pytest.mark.unit


def own_schema(rows: int = 3000, seed: int = 0) -> pd.DataFrame:
    """A user's data that is not the project's: integer ids, upper-case names, no categorical column."""
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2026-01-01")
    return pd.DataFrame({
        "TRANSACTION_ID": np.arange(rows) + 10_000,
        "TX_DATETIME": start + pd.to_timedelta(np.sort(rng.integers(0, 30 * 86_400, rows)), unit="s"),
        "CUSTOMER_ID": rng.integers(0, 120, rows),
        "TERMINAL_ID": rng.integers(0, 40, rows),
        "TX_AMOUNT": np.round(rng.lognormal(3, 1, rows), 2),
        "TX_FRAUD": (rng.random(rows) < 0.03).astype(int),
    })


def write(frame: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def drafted(data: Path, tmp_path: Path, **kwargs: str) -> Path:
    out = tmp_path / "drafted.yaml"
    out.write_text(draft_contract(data, **kwargs).text)  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_draft_of_an_own_schema_keeps_integer_ids_and_has_no_categorical_input(tmp_path: Path, suffix: str) -> None:
    frame = own_schema()
    data = write(frame, tmp_path / f"transactions{suffix}")

    out = drafted(data, tmp_path)
    contract = load_contract(out)

    text = out.read_text()
    assert text.startswith("# DRAFT data contract")
    assert "unknown_category_tolerance: 0.001" in text
    assert "categorical: []" in text
    assert (contract.id_column, contract.timestamp_column, contract.label_column) == (
        "TRANSACTION_ID", "TX_DATETIME", "TX_FRAUD")
    assert contract.column("TRANSACTION_ID").dtype == "int"
    assert contract.column("TRANSACTION_ID").unique
    assert contract.column("TX_DATETIME").dtype == "datetime"
    assert [(e.name, e.join_key) for e in contract.entities] == [("customer", "CUSTOMER_ID"),
                                                                 ("terminal", "TERMINAL_ID")]
    assert contract.column("CUSTOMER_ID").dtype == "int"
    assert contract.column("TERMINAL_ID").dtype == "int"
    amount = contract.column("TX_AMOUNT")
    assert amount.dtype == "float"
    assert amount.min is not None
    assert amount.max is not None
    assert amount.min <= frame["TX_AMOUNT"].min()
    assert frame["TX_AMOUNT"].max() <= amount.max
    assert amount.max <= 2 * frame["TX_AMOUNT"].max()  # widened, not unbounded
    assert contract.model_inputs.categorical == ()
    assert contract.raw_inputs == ["TX_AMOUNT"]  # never an id, an entity key, the label or the timestamp
    label = contract.column("TX_FRAUD")
    assert (label.dtype, label.min, label.max) == ("int", 0, 1)
    rate = frame["TX_FRAUD"].mean()
    assert contract.label_rate.min < rate < contract.label_rate.max
    assert contract.split.validation_fraction == contract.split.test_fraction == 0.15
    features = {f.name: f for v in contract.feature_views for f in v.features}
    assert {v.entity for v in contract.feature_views} == {"customer", "terminal"}
    assert features["customer_count_24h"].agg == "count"
    assert features["terminal_tx_amount_mean_7d"].column == "TX_AMOUNT"
    assert features["customer_seconds_since_previous"].window == "30d"
    rates = sorted((f.name, f.window, f.delay) for f in features.values() if f.agg == "label_rate")
    assert rates == sorted((f"{entity}_tx_fraud_rate_{w}", w, "7d") for entity in ("customer", "terminal")
                           for w in ("1d", "7d", "30d"))
    assert "set the delay to how late yours" in text  # the header names the assumption to edit
    assert features["terminal_tx_amount_ratio_7d"].agg == "ratio_to_mean"  # amounts are never negative
    assert len(contract.time_features) == 4

    report = check_data(data, contract)
    assert report.problems == []
    assert (report.rows, report.columns) == (len(frame), 6)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_draft_of_the_generators_data_finds_its_categories_and_passes_its_own_check(
        tmp_path: Path, suffix: str) -> None:
    data = tmp_path / f"generated{suffix}"
    write_transactions(data, 4000, seed=3)
    frame = generate_transactions(4000, seed=3)

    contract = load_contract(drafted(data, tmp_path))

    assert contract.id_column == "transaction_id"
    assert contract.column("transaction_id").dtype == "string"
    assert {e.join_key for e in contract.entities} == {"customer_id", "merchant_id"}
    assert set(contract.model_inputs.categorical) == {"merchant_category", "channel", "country"}
    assert set(contract.column("channel").categories or ()) == set(frame["channel"])
    assert contract.column("event_timestamp").dtype == "datetime"
    assert [n.name for n in contract.model_inputs.numeric] == ["amount"]
    assert check_data(data, contract).problems == []
    assert check_data(data, load_contract(BUNDLED_CONTRACT)).problems == []


def test_each_planted_problem_is_its_own_line(tmp_path: Path) -> None:
    frame = generate_transactions(3000, seed=5)
    contract_path = drafted(write(frame, tmp_path / "clean.parquet"), tmp_path)
    contract = load_contract(contract_path)
    bad = frame.drop(columns=["country"])
    bad.loc[:2, "amount"] = 1e9  # out of range
    bad.loc[10, "customer_id"] = None  # a null
    bad.loc[20, "transaction_id"] = frame["transaction_id"].iloc[21]  # a reused id
    bad.loc[100:199, "channel"] = "carrier_pigeon"  # 100 of 3000: above the tolerance
    bad["note"] = "x"

    report = check_data(write(bad, tmp_path / "bad.parquet"), contract)

    amount_line = next(p for p in report.problems if p.startswith("column amount"))
    assert amount_line == (f"column amount: 3 values outside [0, {contract.column('amount').max:g}] "
                           f"(observed {frame['amount'].iloc[3:].min():g} to 1e+09)")
    assert sorted(report.problems) == sorted([
        "missing column country",
        amount_line,
        "column customer_id: 1 nulls, and the contract says it is not nullable",
        "column transaction_id: 1 repeated values in a unique column",
        "column channel: 100 values (3.33%) are not among its categories, above the tolerance 0.001 "
        "(e.g. 'carrier_pigeon')",
    ])
    assert report.notes == ["extra column note: not in the contract (ignored)"]


def test_a_csv_names_unparseable_timestamps_bad_ints_label_rate_and_too_few_rows(tmp_path: Path) -> None:
    frame = own_schema(rows=2000)
    contract = load_contract(drafted(write(frame, tmp_path / "clean.csv"), tmp_path))
    bad = frame.head(400).astype({"TX_DATETIME": str, "TERMINAL_ID": str})
    bad.loc[5, "TX_DATETIME"] = "yesterday"
    bad.loc[6, "TERMINAL_ID"] = "T-7"
    bad["TX_FRAUD"] = 1

    report = check_data(write(bad, tmp_path / "bad.csv"), contract)

    assert "column TX_DATETIME: 1 values are not parseable timestamps (e.g. 'yesterday')" in report.problems
    assert "column TERMINAL_ID: 1 values are not int values (e.g. 'T-7')" in report.problems
    assert f"400 rows, fewer than min_rows {contract.min_rows:,}" in report.problems
    assert any(p.startswith("label TX_FRAUD: rate 1 outside label_rate [") for p in report.problems)
    assert len(report.problems) == 4


def test_exact_duplicate_rows_are_named_unless_the_contract_allows_them(tmp_path: Path) -> None:
    frame = own_schema(rows=1000)
    contract = load_contract(drafted(write(frame, tmp_path / "clean.parquet"), tmp_path))
    doubled = pd.concat([frame, frame.head(3)], ignore_index=True)

    report = check_data(write(doubled, tmp_path / "doubled.parquet"), contract)

    assert "3 rows repeat another row exactly (allow_duplicate_rows is false)" in report.problems
    assert "column TRANSACTION_ID: 3 repeated values in a unique column" in report.problems
    allowing = contract.model_copy(update={"allow_duplicate_rows": True})
    assert not any("repeat another row" in p for p in check_data(tmp_path / "doubled.parquet", allowing).problems)


def test_a_true_false_label_becomes_a_0_1_int_with_its_spellings(tmp_path: Path) -> None:
    frame = own_schema(rows=1500)
    frame["TX_FRAUD"] = frame["TX_FRAUD"].map({1: "True", 0: "False"})
    data = write(frame.rename(columns={"TX_FRAUD": "outcome"}), tmp_path / "bools.csv")

    contract = load_contract(drafted(data, tmp_path, label="outcome"))

    label = contract.column("outcome")
    assert (label.dtype, label.min, label.max) == ("int", 0, 1)
    assert label.true_values == ("true",)
    assert label.false_values == ("false",)
    assert check_data(data, contract).problems == []


def test_ids_with_leading_zeros_stay_strings(tmp_path: Path) -> None:
    frame = own_schema(rows=1000)
    frame["CUSTOMER_ID"] = frame["CUSTOMER_ID"].map(lambda n: f"{n:06d}")
    data = write(frame, tmp_path / "zeros.csv")

    contract = load_contract(drafted(data, tmp_path))

    assert contract.column("CUSTOMER_ID").dtype == "string"
    assert check_data(data, contract).problems == []


def test_a_draft_without_a_recognisable_label_asks_for_one(tmp_path: Path) -> None:
    data = write(own_schema(rows=500).rename(columns={"TX_FRAUD": "outcome"}), tmp_path / "nolabel.parquet")

    with pytest.raises(InputError, match="name it with --label"):
        draft_contract(data)
    with pytest.raises(InputError, match="'TX_AMOUNT' must hold 0/1"):
        draft_contract(data, label="TX_AMOUNT")
    assert draft_contract(data, label="outcome").contract.label_column == "outcome"
