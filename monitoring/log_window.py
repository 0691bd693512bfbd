"""The drift job's window read a column at a time straight from the prediction log's segments.

A table of the whole window costs about 350 bytes a row even in Arrow's buffers (ten million
predictions: 3.5 GB), though each drift test reads one column. A :class:`LogWindow` holds only
which rows of which segments are in the window and their order by ``logged_at``; ``window[name]``
maps the segments (the operating system pages in only that column's buffers), copies out the
window's rows of that column and lets the maps go, so memory holds one column at a time. A segment
the service wrote an answer at a time (thousands of one-row batches) is the exception: finding a
column means decoding every batch's header again, 0.18 s a column for 8,000 answers of 90 columns,
so the window keeps such a segment's batches (and its map) from the pass that read ``logged_at``,
up to KEEP_MAPPED_BYTES of segment files per window: 0.03 s a column.

It answers what the drift tests ask of a pandas DataFrame (``name in window``, ``window[name]``,
``len``, ``columns``, ``empty``), in the row order :func:`monitoring.window.read_window` gives:
the segments concatenated, then sorted by ``logged_at`` (stable).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from mlops.prediction_frame import arrow_backed
from mlops.prediction_log import FLAT_PREFIXES, in_window, read_segment, segment_paths
from monitoring.window import WindowSpec

# A segment of at least this many batches keeps them for the window's life (see the module's docstring),
# within this many bytes of segment files per window.
KEEP_FROM_BATCHES = 256
KEEP_MAPPED_BYTES = 256 * 2**20


@dataclass(frozen=True)
class _Part:
    """One segment's rows in the window (their row numbers in the segment) and its column names."""

    path: Path
    rows: np.ndarray
    names: frozenset[str]
    batches: tuple[pa.RecordBatch, ...] | None = None  # kept: a segment of many small batches


@dataclass(frozen=True)
class LogWindow:
    """Rows of the prediction log in a window; ``positions``: the window's rows, oldest first, as
    positions in the parts' rows concatenated."""

    parts: tuple[_Part, ...]
    names: dict[str, str]  # the window's column name -> the segments' (nested fields are prefixed there)
    positions: np.ndarray

    def __len__(self) -> int:
        return int(self.positions.size)

    @property
    def empty(self) -> bool:
        return self.positions.size == 0

    @property
    def columns(self) -> list[str]:
        return list(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __getitem__(self, name: str) -> pd.Series:
        """The window's values of one column (a fresh Series, index 0..n-1; a missing field is null)."""
        series: pd.Series = self.arrow(name).to_pandas(types_mapper=arrow_backed)
        return series.rename(name)

    def arrow(self, name: str) -> pa.ChunkedArray:
        """The window's values of one column in Arrow's buffers."""
        if name not in self.names:
            raise KeyError(name)
        stored, (rows, order) = self.names[name], self._reading
        chunks: list[pa.Array] = []
        for part, wanted in zip(self.parts, rows, strict=True):
            if wanted.size and stored in part.names:
                chunks += _read_rows(part, stored, wanted).chunks
            elif wanted.size:
                chunks.append(pa.nulls(wanted.size))
        kind = next((c.type for c in chunks if c.type != pa.null()), pa.null())
        values = pa.chunked_array([c if c.type == kind else c.cast(kind) for c in chunks], type=kind)
        return values if order is None else values.take(pa.array(order))

    @functools.cached_property
    def _reading(self) -> tuple[tuple[np.ndarray, ...], np.ndarray | None]:
        """Per part, the rows of its segment this window reads (a version's rows or a sample read only
        theirs); and the window's rows as positions in what those give, None when that is their order."""
        sizes = [part.rows.size for part in self.parts]
        total = sum(sizes)
        if self.positions.size == total and bool(np.all(self.positions == np.arange(total))):
            return tuple(part.rows for part in self.parts), None  # the usual window: no reordering copy
        needed = np.zeros(total, dtype=bool)
        needed[self.positions] = True
        bounds = np.cumsum([0, *sizes])
        rows = tuple(part.rows[needed[start:end]] for part, start, end in zip(self.parts, bounds[:-1], bounds[1:],
                                                                             strict=True))
        return rows, (np.cumsum(needed) - 1)[self.positions]

    def select(self, positions: np.ndarray) -> LogWindow:
        """The rows at ``positions`` of this window (in that order)."""
        return replace(self, positions=self.positions[positions])

    def frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """A DataFrame of ``columns`` (default: all) that the window has."""
        chosen = [c for c in (columns if columns is not None else self.names) if c in self.names]
        return pd.DataFrame({c: self[c] for c in chosen}, columns=chosen)

    def sample(self, rows: int, seed: int = 0) -> LogWindow:
        """A seeded sample of ``rows`` rows (all of them when the window is smaller), in window order."""
        if rows >= len(self):
            return self
        return self.select(np.sort(np.random.default_rng(seed).choice(len(self), rows, replace=False)))

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Each row's value of a column as its text's number in the returned labels (-1: null), read a
        segment at a time: four bytes a row in memory, where the text took Python a string per row."""
        if name not in self.names:
            raise KeyError(name)
        stored, (rows, order) = self.names[name], self._reading
        labels: dict[str, int] = {}
        found: list[np.ndarray] = []
        for part, wanted in zip(self.parts, rows, strict=True):
            if stored not in part.names or not wanted.size:
                found.append(np.full(wanted.size, -1, dtype="int32"))
                continue
            encoded = pc.dictionary_encode(_as_text(_read_rows(part, stored, wanted))).combine_chunks()
            numbers = [labels.setdefault(str(v), len(labels)) for v in encoded.dictionary.to_pylist()]
            lookup = np.array([*numbers, -1], dtype="int32")  # a null's index, filled with -1, reads the last
            found.append(lookup[pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)])
        codes = np.concatenate(found) if found else np.empty(0, dtype="int32")
        return (codes if order is None else codes[order]), list(labels)

    def groups(self, keys: Sequence[str]) -> Iterator[tuple[tuple[str, ...], LogWindow]]:
        """(key values, their rows) for each distinct combination of ``keys``, sorted by the values
        (a null reads as "")."""
        combined = np.zeros(len(self), dtype="int64")
        labels: list[list[str]] = []
        for key in keys:
            codes, names = self.codes(key)
            labels.append([*names, ""])
            combined = combined * len(labels[-1]) + np.where(codes < 0, len(names), codes)
        found: dict[tuple[str, ...], int] = {}
        for code in np.flatnonzero(np.bincount(combined)).tolist():
            values, rest = [], code
            for names in reversed(labels):
                rest, at = divmod(rest, len(names))
                values.append(names[at])
            found[tuple(reversed(values))] = code
        for values_of_keys, code in sorted(found.items()):
            yield values_of_keys, self if len(found) == 1 else self.select(np.flatnonzero(combined == code))


def _read_rows(part: _Part, stored: str, rows: np.ndarray) -> pa.ChunkedArray:
    batches = [batch.column(stored) for batch in (part.batches or read_segment(part.path))]
    # take() copies the rows out of the map, so the map goes once this column's chunk is built.
    return pa.chunked_array(batches).take(pa.array(rows))


def open_window(directory: Path, spec: WindowSpec) -> LogWindow:
    """The rows of ``spec`` in the log under ``directory``; reads only each segment's ``logged_at``."""
    parts: list[_Part] = []
    logged: list[np.ndarray] = []
    names: dict[str, str] = {}
    keep_budget = KEEP_MAPPED_BYTES
    for path in segment_paths(directory, spec.start, spec.end) if directory.exists() else []:
        batches = list(read_segment(path))
        if not batches:
            continue
        schema = batches[0].schema
        times = pa.chunked_array([b.column("logged_at") for b in batches])
        rows = np.flatnonzero(in_window(times, spec.start, spec.end).to_numpy(zero_copy_only=False))
        if rows.size == 0:
            continue
        size = path.stat().st_size
        keep = len(batches) >= KEEP_FROM_BATCHES and size <= keep_budget
        keep_budget -= size if keep else 0
        parts.append(_Part(path, rows, frozenset(schema.names), tuple(batches) if keep else None))
        logged.append(times.take(pa.array(rows)).cast(pa.int64()).to_numpy())
        for stored in schema.names:
            names.setdefault(_short(stored), stored)
    moments = np.concatenate(logged) if logged else np.empty(0, dtype="int64")
    positions = np.argsort(moments, kind="stable")
    if spec.last is not None:
        positions = positions[max(positions.size - spec.last, 0):]
    return LogWindow(tuple(parts), names, positions)


def _as_text(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Values keyed by their text as pandas' ``str`` writes it (a reference profile's keys)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return values
    plain = values.to_pandas()
    return pa.chunked_array([pa.array(plain.astype(str).where(plain.notna(), None), type=pa.string())])


def _short(stored: str) -> str:
    return stored.split(".", 1)[1] if stored.startswith(FLAT_PREFIXES) else stored
