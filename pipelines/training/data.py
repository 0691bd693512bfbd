"""Training inputs as columnar arrays: only the model's input columns and the label, read in chunks.

A split file is read with pyarrow, a record batch at a time and only the columns the model needs, into
arrays allocated once for the whole split (float32 numeric inputs in contract order, int64 category
indices, float32 labels), so memory is the arrays plus one batch; no row ever becomes a Python object.
The category encoding is the model's (index i+1 for the i-th contract category, 0 for anything else),
computed by Arrow instead of a per-value dictionary lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from mlops.contract import DataContract
from mlops.errors import InputError, TrainingError
from mlops.model import UNKNOWN_INDEX

_READ_BATCH_ROWS = 262_144
_PINNED_CHUNK_ROWS = 1 << 20


@dataclass(frozen=True)
class SplitArrays:
    """One split, encoded: ``numeric`` float32 [N, k], ``categorical`` int64 [N, c], ``labels`` float32 [N]."""

    numeric: np.ndarray
    categorical: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


def input_columns(contract: DataContract) -> list[str]:
    """What training reads of a split file: the numeric inputs, the categorical inputs, the label."""
    return [*contract.numeric_inputs, *contract.model_inputs.categorical, contract.label_column]


def read_split(path: Path, contract: DataContract, vocabs: dict[str, list[str]], split: str) -> SplitArrays:
    """Read and encode a split file; a missing input column is bad input, named."""
    try:
        source = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{split} split {path} is not a readable Parquet file: {exc}") from exc
    wanted = input_columns(contract)
    missing = [name for name in wanted if name not in source.schema_arrow.names]
    if missing:
        raise InputError(f"{split} split {path} lacks model input columns: {', '.join(missing)}")
    arrays = _allocate(source.metadata.num_rows, contract)
    start = 0
    for batch in source.iter_batches(batch_size=_READ_BATCH_ROWS, columns=wanted):
        _fill(arrays, start, batch, contract, vocabs, split)
        start += batch.num_rows
    return _checked(arrays, contract, split)


def frame_arrays(frame: pd.DataFrame, contract: DataContract, vocabs: dict[str, list[str]],
                 split: str) -> SplitArrays:
    """The same encoding for a frame already in memory (search, tests, notebooks)."""
    missing = [name for name in input_columns(contract) if name not in frame.columns]
    if missing:
        raise InputError(f"{split} data lacks model input columns: {', '.join(missing)}")
    table = pa.Table.from_pandas(frame[input_columns(contract)], preserve_index=False)
    arrays = _allocate(table.num_rows, contract)
    start = 0
    for batch in table.to_batches(max_chunksize=_READ_BATCH_ROWS):
        _fill(arrays, start, batch, contract, vocabs, split)
        start += batch.num_rows
    return _checked(arrays, contract, split)


def split_arrays(data: SplitArrays | pd.DataFrame, contract: DataContract, vocabs: dict[str, list[str]],
                 split: str) -> SplitArrays:
    """Arrays as given, or a frame encoded."""
    return data if isinstance(data, SplitArrays) else frame_arrays(data, contract, vocabs, split)


def _allocate(rows: int, contract: DataContract) -> SplitArrays:
    return SplitArrays(numeric=np.empty((rows, len(contract.numeric_inputs)), np.float32),
                       categorical=np.empty((rows, len(contract.model_inputs.categorical)), np.int64),
                       labels=np.empty(rows, np.float32))


def _fill(arrays: SplitArrays, start: int, batch: pa.RecordBatch, contract: DataContract,
          vocabs: dict[str, list[str]], split: str) -> None:
    rows = slice(start, start + batch.num_rows)
    for i, name in enumerate(contract.numeric_inputs):
        arrays.numeric[rows, i] = _as_float(batch.column(name), name, split)
    for i, name in enumerate(contract.model_inputs.categorical):
        arrays.categorical[rows, i] = _category_indices(batch.column(name), vocabs[name])
    arrays.labels[rows] = _as_float(batch.column(contract.label_column), contract.label_column, split)


def _as_float(column: pa.Array, name: str, split: str) -> np.ndarray:
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
            or pa.types.is_boolean(column.type)):
        raise InputError(f"{split} column {name!r} is {column.type}, not numeric")
    # Nulls become NaN, which the finiteness check below names.
    return np.asarray(column.cast(pa.float32()).to_numpy(zero_copy_only=False), dtype=np.float32)


def _category_indices(column: pa.Array, vocabulary: list[str]) -> np.ndarray:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        column = column.cast(pa.string())
    positions = pc.index_in(column, value_set=pa.array(vocabulary, type=column.type))
    # Index i+1 for the i-th category; unseen and missing values map to the unknown index.
    encoded = pc.fill_null(pc.add(positions, 1), UNKNOWN_INDEX)
    return np.asarray(encoded.to_numpy(zero_copy_only=False), dtype=np.int64)


def _checked(arrays: SplitArrays, contract: DataContract, split: str) -> SplitArrays:
    finite = np.isfinite(arrays.numeric).all(axis=0)
    bad = [name for name, ok in zip(contract.numeric_inputs, finite, strict=True) if not ok]
    if bad:  # NaN would silently poison the scaler and every gradient
        raise TrainingError(f"{split} data has missing or non-finite values in {bad}")
    if not np.isin(arrays.labels, (0.0, 1.0)).all():
        raise TrainingError(f"{split} labels ({contract.label_column}) must be 0 or 1, with none missing")
    positives = int(arrays.labels.sum())
    if positives in (0, len(arrays)):
        only = "positive" if positives else "negative"
        raise TrainingError(f"{split} labels are all {only} ({len(arrays)} rows): a classifier needs both classes")
    return arrays


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A tensor on ``device``: the array itself on the CPU; on a GPU copied through pinned host memory in
    chunks (asynchronous copies, page-locked staging bounded by a chunk, not by the split)."""
    host = torch.from_numpy(array)
    if device.type != "cuda":
        return host
    target = torch.empty(host.shape, dtype=host.dtype, device=device)
    for start in range(0, len(host), _PINNED_CHUNK_ROWS):
        chunk = host[start:start + _PINNED_CHUNK_ROWS].pin_memory()
        target[start:start + len(chunk)].copy_(chunk, non_blocking=True)
    torch.cuda.synchronize(device)  # the pinned chunks may be freed only after their copies ran
    return target


def epoch_rows(positive: torch.Tensor, negative_sample_rate: float, seed: int, epoch: int) -> torch.Tensor:
    """The rows one epoch trains on, in its order: a permutation of every row, or, with a rate below 1,
    of every positive and a fresh Bernoulli(rate) sample of the negatives. It depends on (seed, epoch)
    only, so a resumed run and every rank of a distributed run draw the same rows."""
    generator = torch.Generator().manual_seed(seed + epoch)
    if negative_sample_rate >= 1.0:
        return torch.randperm(len(positive), generator=generator)
    kept = (positive | (torch.rand(len(positive), generator=generator) < negative_sample_rate)).nonzero()
    rows = kept.squeeze(1)
    return rows[torch.randperm(len(rows), generator=generator)]


def sampled_negative_rate(configured: float, max_epoch_rows: int | None, positives: int, rows: int) -> float:
    """The share of negatives each epoch draws: the configured rate, lowered where needed so that an
    epoch holds about ``max_epoch_rows`` rows. Every positive is kept (they are rare and carry the
    signal) and at least half the epoch is negatives; the loss weights undo the sampling."""
    negatives = rows - positives
    if max_epoch_rows is None or rows <= max_epoch_rows or negatives <= 0:
        return configured
    return min(configured, max(max_epoch_rows - positives, max_epoch_rows // 2) / negatives)


def negative_weights(labels: torch.Tensor, negative_sample_rate: float) -> torch.Tensor | None:
    """Loss weight per row that undoes negative downsampling: 1/rate for a negative, 1 for a positive, so
    the sampled epoch's expected loss is the full data's (None when nothing is downsampled)."""
    if negative_sample_rate >= 1.0:
        return None
    return torch.where(labels > 0.5, 1.0, 1.0 / negative_sample_rate).to(labels.dtype)
