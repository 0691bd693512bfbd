"""The contract's Great Expectations suite over a snapshot of any size: batch by batch, results combined.

Memory is bounded by one batch of :data:`BATCH_ROWS` rows. Each batch is validated by GX's pandas
engine and the per-batch results combine exactly: row counts and unexpected counts add up, a
mean is weighted by its batch's values, and ``mostly`` is judged on the totals, as GX judges it
on one frame. Uniqueness stays exact over the whole file: a 64-bit hash of every row (and of
every unique column) is kept, the rows whose hash occurs twice are gathered in a second pass,
and GX judges the uniqueness expectations on exactly those rows (no row outside them can
repeat one, since equal values hash equal), so its counts are the whole file's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

log = logging.getLogger(__name__)
BATCH_ROWS = 500_000
ROW_COUNT = "expect_table_row_count_to_be_between"
COLUMN_EXISTS = "expect_column_to_exist"
MEAN = "expect_column_mean_to_be_between"
# A unique column is judged on the distinct rows: an exact duplicate row is one finding (duplicate
# rows), an id shared by rows that differ another (reused id), never both for the same rows.
UNIQUE = "expect_column_values_to_be_unique"
NO_DUPLICATE_ROWS = "expect_compound_columns_to_be_unique"
_SAMPLES = 5
Plan = list[tuple[str, dict[str, Any]]]


@dataclass
class Tally:
    """One expectation's results over all batches."""

    kind: str
    kwargs: dict[str, Any]
    success: bool = True
    values: int = 0  # values judged: every row for the null check, the non-null ones otherwise
    unexpected: int = 0
    samples: list[Any] = field(default_factory=list)
    observed: list[Any] = field(default_factory=list)  # per batch: a dtype name, a row count, a mean
    weights: list[int] = field(default_factory=list)  # a mean's non-null values per batch
    not_run: bool = False  # GX could not evaluate it (a missing column, values of another type)

    @property
    def column(self) -> str | None:
        column: str | None = self.kwargs.get("column")
        return column


def run_suite(snapshot_path: Path, plan: Plan) -> tuple[int, list[str], list[Tally]]:
    """(rows, columns, one tally per plan entry in plan order) for the Parquet file ``snapshot_path``."""
    parquet = pq.ParquetFile(snapshot_path)
    rows, columns = parquet.metadata.num_rows, list(parquet.schema_arrow.names)
    tallies = [Tally(kind, kwargs) for kind, kwargs in plan]
    per_batch = [t for t in tallies if t.kind not in (UNIQUE, NO_DUPLICATE_ROWS)]
    whole_file = [t for t in tallies if t.kind in (UNIQUE, NO_DUPLICATE_ROWS)]
    engine = _Engine()
    hashes = _RowHashes(rows, [t.column for t in whole_file if t.kind == UNIQUE and t.column in columns])
    for frame in _batches(parquet):
        for tally, result in zip(per_batch, engine.validate("batch", frame, per_batch), strict=True):
            _add(tally, result, frame)
        hashes.add(frame)
    if rows == 0:  # GX still judges an empty table: its row count, its columns
        for tally, result in zip(per_batch, engine.validate("batch", _empty(parquet), per_batch), strict=True):
            _add(tally, result, None)
    for tally in per_batch:
        _judge(tally)
    if whole_file:
        candidates = _gather(parquet, hashes.repeated())
        distinct = candidates.drop_duplicates()
        distinct_rows = rows - (len(candidates) - len(distinct))
        for tally in whole_file:
            on, total = (distinct, distinct_rows) if tally.kind == UNIQUE else (candidates, rows)
            (result,) = engine.validate(f"{tally.kind}-{tally.column}", on, [tally])
            _add(tally, result, None)
            tally.success = bool(result.success) and not tally.not_run
            tally.values = total
    return rows, columns, tallies


class _Engine:
    """One ephemeral GX context (no project files, no network); a pandas asset per kind of batch."""

    def __init__(self) -> None:
        # GX releases that ship usage analytics read this switch; a validation step never phones home.
        os.environ["GX_ANALYTICS_ENABLED"] = "False"
        import great_expectations as gx  # deferred: takes seconds to import
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self._gx = gx
        self._context = gx.get_context(mode="ephemeral")
        self._context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm noise in logs
        self._source = self._context.data_sources.add_pandas("snapshot")
        self._assets: dict[str, tuple[Any, Any]] = {}

    def validate(self, name: str, frame: pd.DataFrame, tallies: list[Tally]) -> list[Any]:
        """GX's results of ``tallies``' expectations on ``frame``, in the tallies' order."""
        from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

        if name not in self._assets:
            definition = self._source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole")
            suite = self._gx.ExpectationSuite(name=f"data-contract-{name}")
            for t in tallies:
                suite.add_expectation(ExpectationConfiguration(type=t.kind, kwargs=t.kwargs).to_domain_obj())
            self._assets[name] = (definition, suite)
        definition, suite = self._assets[name]
        # GX records an expectation on a missing column as a failed result carrying the exception,
        # so the run goes on and the other expectations are still judged.
        results = list(definition.get_batch(batch_parameters={"dataframe": frame}).validate(suite).results)
        by_key = {(r.expectation_config.type, r.expectation_config.kwargs.get("column")): r for r in results}
        return [by_key[(t.kind, t.column)] for t in tallies]


class _RowHashes:
    """A 64-bit hash of every row and of every unique column, in file order (8 bytes a row each)."""

    def __init__(self, rows: int, unique_columns: list[str | None]) -> None:
        self._rows = np.empty(rows, np.uint64)
        self._columns = {c: np.empty(rows, np.uint64) for c in unique_columns if c is not None}
        self._filled = 0

    def add(self, frame: pd.DataFrame) -> None:
        end = self._filled + len(frame)
        self._rows[self._filled:end] = pd.util.hash_pandas_object(frame, index=False).to_numpy()
        for name, values in self._columns.items():
            values[self._filled:end] = pd.util.hash_pandas_object(frame[name], index=False).to_numpy()
        self._filled = end

    def repeated(self) -> np.ndarray:
        """Positions of the rows whose row hash, or a unique column's hash, occurs more than once."""
        keep = np.zeros(len(self._rows), bool)
        for values in (self._rows, *self._columns.values()):
            order = np.argsort(values, kind="stable")
            ordered = values[order]
            twice = np.zeros(len(values), bool)
            twice[1:] = ordered[1:] == ordered[:-1]
            twice[:-1] |= twice[1:]
            keep[order[twice]] = True
        return np.flatnonzero(keep)


def _batches(parquet: pq.ParquetFile) -> Iterator[pd.DataFrame]:
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
        yield batch.to_pandas()


def _empty(parquet: pq.ParquetFile) -> pd.DataFrame:
    frame: pd.DataFrame = parquet.schema_arrow.empty_table().to_pandas()
    return frame


def _gather(parquet: pq.ParquetFile, positions: np.ndarray) -> pd.DataFrame:
    """The rows at ``positions`` (ascending), read batch by batch; their file order is kept."""
    if not len(positions):
        return _empty(parquet)
    parts, start = [], 0
    for frame in _batches(parquet):
        end = start + len(frame)
        inside = positions[(positions >= start) & (positions < end)] - start
        if len(inside):
            parts.append(frame.iloc[inside])
        start = end
    gathered: pd.DataFrame = pd.concat(parts, ignore_index=True)
    return gathered


def _add(tally: Tally, result: Any, frame: pd.DataFrame | None) -> None:
    """Fold one batch's GX result into the tally."""
    found = result.result or {}
    if _raised(result.exception_info or {}):
        tally.not_run = True
        log.debug("GX could not evaluate %s on %s: %s", tally.kind, tally.kwargs, result.exception_info)
        return
    if tally.kind == COLUMN_EXISTS:
        tally.success = tally.success and bool(result.success)
    elif "unexpected_count" in found:
        tally.values += int(found.get("element_count", 0)) - int(found.get("missing_count", 0) or 0)
        tally.unexpected += int(found["unexpected_count"])
        for value in found.get("partial_unexpected_list") or []:
            if len(tally.samples) < _SAMPLES and value not in tally.samples:
                tally.samples.append(value)
    elif "observed_value" in found:
        tally.observed.append(found["observed_value"])
        tally.success = tally.success and bool(result.success)
        if tally.kind == MEAN and frame is not None and tally.column is not None:
            tally.weights.append(int(frame[tally.column].count()))


def _judge(tally: Tally) -> None:
    """The verdict on the totals, as GX gives it on one frame."""
    kwargs = tally.kwargs
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    if tally.not_run:
        tally.success = False
    elif tally.kind == ROW_COUNT:
        total = sum(int(n) for n in tally.observed)
        tally.observed = [total]
        tally.success = (low is None or total >= low) and (high is None or total <= high)
    elif tally.kind == MEAN:
        weight = sum(tally.weights)
        if weight == 0 or any(m is None for m in tally.observed):
            tally.observed, tally.success = [None], False
            return
        mean = float(sum(float(m) * w for m, w in zip(tally.observed, tally.weights, strict=True)) / weight)
        tally.observed = [mean]
        tally.success = (low is None or mean >= low) and (high is None or mean <= high)
    elif not tally.observed and tally.kind != COLUMN_EXISTS:  # counted values: ``mostly`` on the totals
        mostly = float(kwargs.get("mostly", 1.0))
        tally.success = tally.values == 0 or (tally.values - tally.unexpected) / tally.values >= mostly


def _raised(info: dict[str, Any]) -> bool:
    # GX nests metric errors one level down, keyed by metric id; expectation errors sit at the top.
    return any(entry.get("raised_exception") for entry in (info, *(v for v in info.values() if isinstance(v, dict))))
