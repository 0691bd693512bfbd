"""Preprocess: the time-based split, and the step end to end against a real Feast store."""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from feature_repo.online import open_online_features
from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.settings import Settings
from pipelines.steps.preprocess import SPLITS, SplitSummary, preprocess, split_file, time_split

pytestmark = pytest.mark.unit

TS = "event_timestamp"
ID = "transaction_id"



@pytest.mark.parametrize("n_rows", [100, 1000, 1237])
def test_time_split_sizes_order_and_coverage(contract: DataContract, n_rows: int) -> None:
    frame = generate_transactions(n_rows, seed=2).sample(frac=1.0, random_state=1).reset_index(drop=True)
    parts = time_split(frame, contract)
    assert list(parts) == list(SPLITS)
    n_val = round(n_rows * contract.split.validation_fraction)
    n_test = round(n_rows * contract.split.test_fraction)
    assert len(parts["validation"]) == n_val
    assert len(parts["test"]) == n_test
    assert len(parts["train"]) == n_rows - n_val - n_test
    train, validation, test = parts["train"], parts["validation"], parts["test"]
    assert train[TS].max() <= validation[TS].min()
    assert validation[TS].max() <= test[TS].min()
    for part in parts.values():
        assert part[TS].is_monotonic_increasing
        assert list(part.index) == list(range(len(part)))
    ids = pd.concat([p[ID] for p in parts.values()])
    assert ids.is_unique
    assert set(ids) == set(frame[ID])
    # Rows are moved whole, not mixed up between columns.
    merged = pd.concat(parts.values()).set_index(ID).loc[frame[ID]].reset_index()
    pd.testing.assert_frame_equal(merged[list(frame.columns)], frame)


def test_time_split_respects_other_fractions(contract: DataContract) -> None:
    custom = contract.model_copy(update={"split": contract.split.model_copy(
        update={"validation_fraction": 0.1, "test_fraction": 0.3})})
    parts = time_split(generate_transactions(1000, seed=2), custom)
    assert [len(parts[name]) for name in SPLITS] == [600, 100, 300]


def test_time_split_ties_break_by_id(contract: DataContract) -> None:
    t0 = pd.Timestamp("2026-01-01", tz="UTC")
    frame = pd.DataFrame({ID: [f"T{i}" for i in (9, 3, 7, 1, 5, 0, 8, 2, 6, 4)], TS: [t0] * 10})
    parts = time_split(frame, contract)
    # round(10 * 0.15) == 2 rows each for validation and test.
    assert [p[ID].tolist() for p in parts.values()] == [
        ["T0", "T1", "T2", "T3", "T4", "T5"], ["T6", "T7"], ["T8", "T9"]]


@pytest.mark.parametrize("n_rows", [0, 1, 2, 3])
def test_too_few_rows_raise_value_error(contract: DataContract, n_rows: int) -> None:
    frame = generate_transactions(100, seed=2).head(n_rows)
    with pytest.raises(ValueError, match=f"{n_rows} rows are too few"):
        time_split(frame, contract)


def test_four_rows_are_enough(contract: DataContract) -> None:
    parts = time_split(generate_transactions(100, seed=2).head(4), contract)
    assert [len(parts[name]) for name in SPLITS] == [2, 1, 1]


@dataclass
class Preprocessed:
    frame: pd.DataFrame
    settings: Settings
    out_dir: Path
    summaries: list[SplitSummary]


@pytest.fixture(scope="module")
def preprocessed(tmp_path_factory: pytest.TempPathFactory, contract: DataContract) -> Preprocessed:
    # Importing feast prepends simplefilter("once", DeprecationWarning) to the process's filters,
    # which would mask pytest's filterwarnings for the rest of this fixture: keep it scoped.
    with warnings.catch_warnings():
        importlib.import_module("feast")
    root = tmp_path_factory.mktemp("preprocess")
    frame = generate_transactions(1000, seed=12)
    # Same-second pairs: a second transaction of the same card at the very same instant.
    twins = frame.iloc[::50].assign(transaction_id=lambda f: f[ID] + "-twin", amount=lambda f: f["amount"] + 1)
    frame = pd.concat([frame, twins]).sort_values([TS, ID]).reset_index(drop=True)
    snapshot = root / "snapshot" / "data.parquet"
    snapshot.parent.mkdir()
    frame.to_parquet(snapshot, index=False)
    settings = Settings(home=root / "home")
    out_dir = root / "splits"
    summaries = preprocess(snapshot, contract, settings, out_dir)
    return Preprocessed(frame, settings, out_dir, summaries)


def test_preprocess_writes_three_splits_with_features_and_label(preprocessed: Preprocessed,
                                                                contract: DataContract) -> None:
    frame = preprocessed.frame
    assert sorted(p.name for p in preprocessed.out_dir.iterdir()) == [
        "test.parquet", "train.parquet", "validation.parquet"]
    assert [s.name for s in preprocessed.summaries] == list(SPLITS)
    parts = {s.name: pd.read_parquet(s.path) for s in preprocessed.summaries}
    expected_sizes = [len(p) for p in time_split(frame, contract).values()]
    assert [len(parts[name]) for name in SPLITS] == expected_sizes
    for summary in preprocessed.summaries:
        part = parts[summary.name]
        assert Path(summary.path) == preprocessed.out_dir / f"{summary.name}.parquet"
        assert summary.rows == len(part)
        assert summary.positives == int(part[contract.label_column].sum())
        assert summary.start == str(part[TS].min())
        assert summary.end == str(part[TS].max())
        for column in [*frame.columns, *contract.feature_names]:
            assert column in part.columns, (summary.name, column)
        assert part[contract.feature_names].notna().all().all()
        assert set(part[contract.label_column].unique()) <= {0, 1}
    assert sum(s.positives for s in preprocessed.summaries) == int(frame[contract.label_column].sum())
    assert parts["train"][TS].max() <= parts["validation"][TS].min()
    assert parts["validation"][TS].max() <= parts["test"][TS].min()
    everything = pd.concat(parts.values())
    assert everything[ID].is_unique
    assert set(everything[ID]) == set(frame[ID])
    # Features carry history (not all defaults) and exclude the row's own transaction.
    assert (everything["merchant_txn_count_24h"] > 0).mean() > 0.5
    first_of_customer = everything.groupby("customer_id")[TS].transform("min") == everything[TS]
    assert (everything.loc[first_of_customer, "customer_txn_count_24h"] == 0).all()


def test_same_instant_transactions_train_and_keep_the_row_count(preprocessed: Preprocessed,
                                                                   contract: DataContract) -> None:
    frame = preprocessed.frame
    parts = pd.concat(pd.read_parquet(s.path) for s in preprocessed.summaries)
    assert len(parts) == len(frame)
    twins = parts[parts[ID].str.endswith("-twin")].set_index(ID)
    originals = parts.set_index(ID).loc[twins.index.str.removesuffix("-twin")]
    assert len(twins) == 20
    # Neither of two same-instant transactions sees the other: [t - w, t) excludes t. A feature that
    # compares the row's own amount (one more for the twin) sees the same window, so the same mean.
    compared = {f.name: f for v in contract.feature_views for f in v.features if f.uses_current_value}
    for name in contract.feature_names:
        if name not in compared:
            assert (twins[name].to_numpy() == originals[name].to_numpy()).all(), name
    for name, feature in compared.items():
        assert feature.agg == "ratio_to_mean"  # the bundled contract's one such feature
        seen = originals[name].to_numpy() != 1.0  # 1.0: an empty window (or one of zeros)
        twin_means = twins["amount"].to_numpy()[seen] / twins[name].to_numpy()[seen]
        original_means = originals["amount"].to_numpy()[seen] / originals[name].to_numpy()[seen]
        assert seen.any()
        np.testing.assert_allclose(twin_means, original_means, rtol=1e-9, err_msg=name)


def test_preprocess_leaves_the_online_store_alone(preprocessed: Preprocessed, contract: DataContract) -> None:
    last = preprocessed.frame.iloc[-1]
    online = open_online_features(preprocessed.settings, contract)
    histories = online.read({"customer_id": str(last["customer_id"]), "merchant_id": str(last["merchant_id"])})
    assert all(len(h) == 0 for h in histories.values())
    assert preprocessed.settings.feast_dir.is_relative_to(preprocessed.settings.resolved_home)


@pytest.mark.parametrize("n_rows", [100, 1237])
def test_splitting_a_file_equals_splitting_the_frame(contract: DataContract, tmp_path: Path, n_rows: int) -> None:
    """The out-of-core split of a Parquet table gives the rows, order and summaries of the in-memory one."""
    frame = generate_transactions(n_rows, seed=3)
    frame[TS] = frame[TS].dt.floor("6h")  # many same-instant rows: the order between them is by id
    frame.sample(frac=1.0, random_state=2).to_parquet(tmp_path / "table.parquet", index=False)
    summaries = split_file(tmp_path / "table.parquet", contract, tmp_path / "splits", Settings().duckdb_memory_limit)
    for summary, (name, expected) in zip(summaries, time_split(frame, contract).items(), strict=True):
        got = pd.read_parquet(tmp_path / "splits" / f"{name}.parquet")
        pd.testing.assert_frame_equal(got, expected)
        assert (summary.name, summary.rows, summary.positives) == (name, len(expected),
                                                                   int(expected["is_fraud"].sum()))
        assert (summary.start, summary.end) == (str(expected[TS].min()), str(expected[TS].max()))
