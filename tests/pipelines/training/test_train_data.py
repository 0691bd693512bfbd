"""Training inputs: the columnar reader encodes exactly as the model's own encoder, fails clearly on bad
files, and each epoch's negative sample is reproducible, keeps every fraud and is weighted back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mlops.contract import DataContract
from mlops.errors import InputError, TrainingError
from mlops.model import encode, fit_vocabularies
from pipelines.training.data import (
    epoch_rows,
    frame_arrays,
    input_columns,
    negative_weights,
    read_split,
    sampled_negative_rate,
)
from pipelines.training.family_training import read_frame

pytestmark = pytest.mark.unit

Splits = tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]


def _write(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_parquet(path, index=False)
    return path


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_reader_encodes_as_the_model_does(data: st.DataObject, splits: Splits, contract: DataContract,
                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    vocabs = fit_vocabularies(contract)
    frame = splits[0].sample(data.draw(st.integers(5, 300)), random_state=data.draw(st.integers(0, 10_000)))
    frame = frame.reset_index(drop=True)
    labels = data.draw(st.lists(st.integers(0, 1), min_size=len(frame) - 2, max_size=len(frame) - 2))
    frame[contract.label_column] = [0, 1, *labels]  # both classes, or the reader refuses the split
    for name in contract.model_inputs.categorical:
        # Known categories, unseen ones, missing values; stored as strings or as a pandas category.
        values = data.draw(st.lists(st.sampled_from([*vocabs[name], "never-seen", None]), min_size=len(frame),
                                    max_size=len(frame)))
        column = pd.Series(values, dtype=object)
        frame[name] = column.astype("category") if data.draw(st.booleans()) else column
    path = _write(frame, tmp_path_factory.mktemp("reader") / "train.parquet")

    arrays = read_split(path, contract, vocabs, "train")
    numeric, categorical = encode(frame, contract, vocabs)
    np.testing.assert_array_equal(arrays.numeric, numeric)
    np.testing.assert_array_equal(arrays.categorical, categorical)
    np.testing.assert_array_equal(arrays.labels, frame[contract.label_column].to_numpy(np.float32))
    in_memory = frame_arrays(frame, contract, vocabs, "train")
    np.testing.assert_array_equal(in_memory.categorical, categorical)
    # The other families read a split as a frame whose text columns are categoricals.
    read = read_frame(path, contract, "train")
    assert all(isinstance(read[name].dtype, pd.CategoricalDtype) for name in contract.model_inputs.categorical)
    np.testing.assert_array_equal(np.hstack(encode(read, contract, vocabs)), np.hstack((numeric, categorical)))


def test_reader_ignores_columns_the_model_does_not_read(splits: Splits, contract: DataContract,
                                                        tmp_path: Path) -> None:
    vocabs = fit_vocabularies(contract)
    # A column of nested values no numeric array could hold: never read, so never in the way.
    frame = splits[0].copy()
    frame["notes"] = pd.Series([{"k": [i]} for i in range(len(frame))], index=frame.index, dtype=object)
    arrays = read_split(_write(frame, tmp_path / "train.parquet"), contract, vocabs, "train")
    assert arrays.numeric.shape == (len(frame), len(contract.numeric_inputs))
    np.testing.assert_array_equal(arrays.numeric, encode(frame, contract, vocabs)[0])


def test_missing_input_column_is_named(splits: Splits, contract: DataContract, tmp_path: Path) -> None:
    dropped = contract.numeric_inputs[2]
    path = _write(splits[0].drop(columns=[dropped]), tmp_path / "train.parquet")
    with pytest.raises(InputError, match=dropped):
        read_split(path, contract, fit_vocabularies(contract), "train")


def test_non_numeric_input_is_named(splits: Splits, contract: DataContract, tmp_path: Path) -> None:
    name = contract.numeric_inputs[0]
    path = _write(splits[0].assign(**{name: "12.5"}), tmp_path / "train.parquet")
    with pytest.raises(InputError, match=f"'{name}' is string, not numeric"):
        read_split(path, contract, fit_vocabularies(contract), "train")


def test_unreadable_file_is_bad_input(contract: DataContract, tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    path.write_text("not parquet")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        read_split(path, contract, fit_vocabularies(contract), "train")


@pytest.mark.parametrize(("label", "message"), [(2, "must be 0 or 1"), (None, "must be 0 or 1")])
def test_labels_must_be_binary(label: int | None, message: str, splits: Splits, contract: DataContract,
                               tmp_path: Path) -> None:
    frame = splits[1].astype({contract.label_column: "float64"})
    frame.loc[frame.index[4], contract.label_column] = label
    with pytest.raises(TrainingError, match=message):
        read_split(_write(frame, tmp_path / "validation.parquet"), contract, fit_vocabularies(contract),
                   "validation")


def test_input_columns_are_the_model_inputs_and_the_label(contract: DataContract) -> None:
    assert input_columns(contract) == [*contract.numeric_inputs, *contract.model_inputs.categorical,
                                       contract.label_column]


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 3_000), fraud_share=st.floats(0.0, 0.5), rate=st.floats(0.01, 1.0),
       seed=st.integers(0, 2**31), epoch=st.integers(1, 100))
def test_epoch_rows_keep_every_fraud_and_a_reproducible_share_of_negatives(
    rows: int, fraud_share: float, rate: float, seed: int, epoch: int
) -> None:
    positive = torch.rand(rows, generator=torch.Generator().manual_seed(seed)) < fraud_share
    order = epoch_rows(positive, rate, seed, epoch)
    assert torch.equal(order, epoch_rows(positive, rate, seed, epoch))  # a resumed run draws the same rows
    chosen = order.tolist()
    assert len(set(chosen)) == len(chosen)
    assert set(positive.nonzero().squeeze(1).tolist()) <= set(chosen)
    negatives = int((~positive).sum())
    sampled = len(chosen) - int(positive.sum())
    if rate == 1.0:
        assert sampled == negatives
    # Binomial(negatives, rate): five standard deviations (plus one row) hold for every draw.
    assert abs(sampled - rate * negatives) <= 5 * (negatives * rate * (1 - rate)) ** 0.5 + 1


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 10**8), positive_share=st.floats(0.0, 1.0), configured=st.floats(0.01, 1.0),
       cap=st.one_of(st.none(), st.integers(1_000, 10**7)))
def test_epoch_row_cap_lowers_the_negative_share_only_where_an_epoch_would_exceed_it(
    rows: int, positive_share: float, configured: float, cap: int | None
) -> None:
    positives = int(rows * positive_share)
    negatives = rows - positives
    rate = sampled_negative_rate(configured, cap, positives, rows)
    assert 0 < rate <= configured
    if cap is None or rows <= cap or negatives == 0:
        assert rate == configured
        return
    expected_rows = positives + rate * negatives
    # An epoch holds about the cap, never fewer than half of it as negatives, and never more rows than
    # the configured rate alone would draw.
    assert expected_rows <= max(cap, positives + cap // 2) + 1e-6
    assert rate * negatives >= min(configured * negatives, cap // 2) - 1e-6
    if positives <= cap // 2 and configured * negatives + positives > cap:
        assert expected_rows == pytest.approx(cap)


def test_each_epoch_draws_other_negatives() -> None:
    positive = torch.zeros(10_000, dtype=torch.bool)
    first, second = (set(epoch_rows(positive, 0.1, seed=3, epoch=e).tolist()) for e in (1, 2))
    assert first != second
    assert len(first & second) < 0.2 * len(first)  # independent draws overlap by about the rate


def test_negative_weights_restore_the_full_data_loss() -> None:
    generator = torch.Generator().manual_seed(0)
    labels = (torch.rand(200_000, generator=generator) < 0.02).float()
    losses = torch.rand(200_000, generator=generator)
    rate = 0.1
    rows = epoch_rows(labels > 0.5, rate, seed=1, epoch=1)
    weights = negative_weights(labels, rate)
    assert weights is not None
    assert negative_weights(labels, 1.0) is None
    full_negative_loss = float((losses * (1 - labels)).sum())
    sampled_negative_loss = float((losses[rows] * weights[rows] * (1 - labels[rows])).sum())
    assert sampled_negative_loss == pytest.approx(full_negative_loss, rel=0.02)
    assert float((weights[rows] * labels[rows]).sum()) == float(labels.sum())  # frauds keep weight 1


def test_a_split_without_a_model_input_is_named_in_one_error(splits: Splits, contract: DataContract,
                                                             tmp_path: Path) -> None:
    path = _write(splits[0].drop(columns=["amount"]), tmp_path / "train.parquet")
    with pytest.raises(InputError, match=r"train split .* lacks the model's inputs"):
        read_frame(path, contract, "train")
