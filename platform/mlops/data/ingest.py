"""Ingestion: read a CSV or Parquet source (local path or any fsspec URL) into an immutable snapshot.

A snapshot is ``<snapshots_dir>/<sha256>/data.parquet`` plus ``meta.json``, keyed by the SHA-256
of the source bytes. An existing snapshot is never rewritten; its files are made read-only.
Parsing follows the contract: a CSV's delimiter is sniffed from its header, times become UTC (a
column mixing times with and without an offset is refused by name), and a 0/1 column's declared
true/false spellings become 1/0. Everything else about the content is validation's business.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import fsspec
import pandas as pd

from mlops.contract import DataContract
from mlops.errors import IngestError
from mlops.preflight import connection_failure, source_format

log = logging.getLogger(__name__)
_READ_ONLY = 0o444
_DELIMITERS = (",", ";", "\t", "|")
# A time of day followed by Z, UTC or a numeric offset; a bare date never has an offset.
_OFFSET_SUFFIX = r"\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\s*(?:Z|UTC|[+-]\d{2}(?::?\d{2})?)$"


@dataclass(frozen=True)
class Snapshot:
    path: Path
    sha256: str
    rows: int
    source: str

    @property
    def meta_path(self) -> Path:
        return self.path.parent / "meta.json"


def ingest(source: str, snapshots_dir: Path, contract: DataContract) -> Snapshot:
    """Snapshot ``source``; returns the snapshot (an existing one when the bytes were seen before)."""
    fmt = source_format(source)
    payload = _read_bytes(source)
    digest = hashlib.sha256(payload).hexdigest()
    target = snapshots_dir / digest / "data.parquet"
    if (target.parent / "meta.json").exists():  # meta.json is written last: it marks a whole snapshot
        meta = json.loads((target.parent / "meta.json").read_text())
        return Snapshot(path=target, sha256=digest, rows=int(meta["rows"]), source=source)
    frame = _parse(payload, source, fmt, contract)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, target)
    snapshot = Snapshot(path=target, sha256=digest, rows=len(frame), source=source)
    meta = {**asdict(snapshot), "path": str(target), "created_at": datetime.now(UTC).isoformat()}
    snapshot.meta_path.write_text(json.dumps(meta, indent=2))
    for path in (target, snapshot.meta_path):
        path.chmod(_READ_ONLY)
    return snapshot


def _read_bytes(source: str) -> bytes:
    try:
        with fsspec.open(source, "rb") as handle:
            data: bytes = handle.read()
    except FileNotFoundError as exc:
        unreachable = connection_failure(exc)
        if unreachable:
            raise IngestError(f"cannot read source {source}: {unreachable}", field="source") from exc
        raise IngestError(f"source not found: {source}", field="source") from exc
    except (OSError, ValueError, ImportError) as exc:
        raise IngestError(f"cannot read source {source}: {connection_failure(exc) or exc}", field="source") from exc
    return data


def _parse(payload: bytes, source: str, fmt: str, contract: DataContract) -> pd.DataFrame:
    if not payload.strip():
        # An empty file is data with no rows: validation, not ingestion, rejects it by name.
        return pd.DataFrame({c.name: pd.Series(dtype="object") for c in contract.columns})
    try:
        if fmt == "parquet":
            frame = pd.read_parquet(io.BytesIO(payload))
        else:
            text = gzip.decompress(payload) if source.lower().endswith(".gz") else payload
            frame = pd.read_csv(io.BytesIO(text), sep=_delimiter(text, contract, source))
    except Exception as exc:
        raise IngestError(f"{source} is not readable {fmt}: {exc}", field="source") from exc
    ts = contract.timestamp_column
    if ts in frame.columns:
        frame[ts] = _utc_times(frame[ts], ts, source)
    for col in contract.columns:
        if col.true_values and col.name in frame.columns:
            frame[col.name] = _zero_one(frame[col.name], col.true_values, col.false_values)
    return frame


def _delimiter(text: bytes, contract: DataContract, source: str) -> str:
    """The delimiter that splits the header into the most contract columns (ties: the comma)."""
    header = text.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    names = {c.name for c in contract.columns}
    best = max(_DELIMITERS, key=lambda d: len(names & {f.strip().strip('"') for f in header.split(d)}))
    if best != ",":
        log.info("%s looks %r-delimited (its header splits into the contract's columns); read it so", source, best)
    return best


def _utc_times(values: pd.Series, name: str, source: str) -> pd.Series:
    """Times as UTC; text mixing times with and without an offset is refused, not turned into nulls."""
    if pd.api.types.is_datetime64_any_dtype(values) or not pd.api.types.is_object_dtype(values):
        return pd.to_datetime(values, utc=True, errors="coerce")
    text = values.dropna().astype(str).str.strip()
    with_offset = text.str.contains(_OFFSET_SUFFIX, case=False, regex=True)
    if with_offset.any() and not with_offset.all():
        aware, naive = text[with_offset], text[~with_offset]
        raise IngestError(
            f"{source}: column {name} mixes times with a UTC offset ({len(aware):,} rows, e.g. {aware.iloc[0]!r}) "
            f"and times without one ({len(naive):,} rows, e.g. {naive.iloc[0]!r}); a time without an offset "
            "is ambiguous: give every time an offset, or none (then they are read as UTC)", field=name)
    # ISO 8601 in any of its forms (with or without fractions, "T" or " "); anything else per value.
    parsed = pd.to_datetime(values, utc=True, errors="coerce", format="ISO8601")
    retry = parsed.isna() & values.notna()
    if retry.any():
        parsed[retry] = pd.to_datetime(values[retry], utc=True, errors="coerce", format="mixed")
    return parsed


def _zero_one(values: pd.Series, true_values: tuple[str, ...], false_values: tuple[str, ...]) -> pd.Series:
    """A 0/1 column with the contract's spellings of true and false mapped; other values stay as given."""
    spelled = {**{"1": 1, "0": 0}, **{v.lower(): 1 for v in true_values}, **{v.lower(): 0 for v in false_values}}
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return values
    mapped = values.map(lambda v: spelled.get(str(v).strip().lower(), v) if pd.notna(v) else v)
    if not mapped.map(lambda v: type(v) is int).all():  # an unlisted spelling or a null stays visible
        return mapped
    return mapped.astype("int64")
