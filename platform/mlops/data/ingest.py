"""Ingestion: read a CSV or Parquet source (local path or any fsspec URL) into an immutable snapshot.

A snapshot is ``<snapshots_dir>/<sha256>/data.parquet`` plus ``meta.json``, keyed by the SHA-256
of the source bytes. An existing snapshot is never rewritten; its files are made read-only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import fsspec
import pandas as pd

from mlops.contract import DataContract
from mlops.errors import IngestError

_READ_ONLY = 0o444


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
    fmt = _format_of(source)
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
        raise IngestError(f"source not found: {source}", field="source") from exc
    except (OSError, ValueError, ImportError) as exc:
        raise IngestError(f"cannot read source {source}: {exc}", field="source") from exc
    return data


def _format_of(source: str) -> str:
    name = source.lower().split("?", 1)[0]
    for suffix, fmt in ((".parquet", "parquet"), (".pq", "parquet"), (".csv", "csv"), (".csv.gz", "csv")):
        if name.endswith(suffix):
            return fmt
    raise IngestError(f"cannot tell the format of {source}: use a .csv or .parquet name", field="source")


def _parse(payload: bytes, source: str, fmt: str, contract: DataContract) -> pd.DataFrame:
    if not payload.strip():
        # An empty file is data with no rows: validation, not ingestion, rejects it by name.
        return pd.DataFrame({c.name: pd.Series(dtype="object") for c in contract.columns})
    try:
        if fmt == "parquet":
            frame = pd.read_parquet(io.BytesIO(payload))
        else:
            compression: Literal["gzip"] | None = "gzip" if source.lower().endswith(".gz") else None
            frame = pd.read_csv(io.BytesIO(payload), compression=compression)
    except Exception as exc:
        raise IngestError(f"{source} is not readable {fmt}: {exc}", field="source") from exc
    ts = contract.timestamp_column
    if ts in frame.columns:
        frame[ts] = pd.to_datetime(frame[ts], utc=True, errors="coerce")
    return frame
