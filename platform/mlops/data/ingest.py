"""Ingestion: read a CSV or Parquet source (local path or any fsspec URL) into an immutable snapshot.

A snapshot is ``<snapshots_dir>/<sha256>/data.parquet`` plus ``meta.json``, keyed by the SHA-256
of the source bytes (hashed in blocks as they are read, so the key is the same content hash as
``sha256sum`` of the file). An existing snapshot is never rewritten; its files are made read-only.
The source streams through in chunks of :data:`CHUNK_ROWS` rows (pandas per chunk, Arrow to the
Parquet writer), so memory is bounded by a chunk, not by the file. Parsing follows the contract:
every contract column must be in the header (checked before any row is read), a CSV's delimiter
is sniffed from its header, times become UTC (a column mixing times with and without an offset
is refused by name), and a 0/1 column's declared true/false spellings become 1/0. Everything else
about the content is validation's business.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import fsspec
import pandas as pd
import pyarrow.parquet as pq

from mlops.contract import DataContract
from mlops.data.ingest_chunks import ChunkParser, Widened
from mlops.data.source_columns import Header, check_columns, read_header
from mlops.errors import IngestError
from mlops.preflight import connection_failure, source_format

_READ_ONLY = 0o444
_BLOCK_BYTES = 8 << 20
CHUNK_ROWS = 500_000


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
    with _local_copy(source, snapshots_dir) as (local, digest):
        target = snapshots_dir / digest / "data.parquet"
        if (target.parent / "meta.json").exists():  # meta.json is written last: it marks a whole snapshot
            meta = json.loads((target.parent / "meta.json").read_text())
            return Snapshot(path=target, sha256=digest, rows=int(meta["rows"]), source=source)
        header = read_header(local, fmt, contract, source)
        if header is not None:
            check_columns(header.columns, contract, source)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        rows = _write_snapshot(local, fmt, header, contract, source, tmp)
        os.replace(tmp, target)
    snapshot = Snapshot(path=target, sha256=digest, rows=rows, source=source)
    meta = {**asdict(snapshot), "path": str(target), "created_at": datetime.now(UTC).isoformat()}
    snapshot.meta_path.write_text(json.dumps(meta, indent=2))
    for path in (target, snapshot.meta_path):
        path.chmod(_READ_ONLY)
    return snapshot


@contextmanager
def _local_copy(source: str, snapshots_dir: Path) -> Iterator[tuple[Path, str]]:
    """A local file holding the source's bytes, and their SHA-256; remote bytes land in a temporary file.

    The hash and the parse see the same bytes: a remote source is read once, into the copy.
    """
    parts = urlsplit(source)
    if parts.scheme in ("", "file"):
        local = Path(parts.path if parts.scheme else source).expanduser()
        yield local, _copy_hashing(source, local, None)
        return
    snapshots_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=snapshots_dir) as tmp:
        local = Path(tmp) / (Path(parts.path).name or "source")
        yield local, _copy_hashing(source, None, local)


def _copy_hashing(source: str, local: Path | None, copy: Path | None) -> str:
    """SHA-256 of the source's bytes, read in blocks from ``local`` (or the URL, into ``copy``)."""
    digest = hashlib.sha256()
    try:
        if local is not None:
            with local.open("rb") as handle:
                while block := handle.read(_BLOCK_BYTES):
                    digest.update(block)
        else:
            assert copy is not None
            with fsspec.open(source, "rb") as remote, copy.open("wb") as out:
                while block := remote.read(_BLOCK_BYTES):
                    digest.update(block)
                    out.write(block)
    except FileNotFoundError as exc:
        unreachable = connection_failure(exc)
        if unreachable:
            raise IngestError(f"cannot read source {source}: {unreachable}", field="source") from exc
        raise IngestError(f"source not found: {source}", field="source") from exc
    except (OSError, ValueError, ImportError) as exc:
        raise IngestError(f"cannot read source {source}: {connection_failure(exc) or exc}", field="source") from exc
    return digest.hexdigest()


def _write_snapshot(local: Path, fmt: str, header: Header | None, contract: DataContract, source: str,
                    out: Path) -> int:
    """Stream ``local`` into the Parquet file ``out``; returns the row count.

    A column whose type changes between chunks (whole amounts first, then fractions; digits, then
    text) is widened for the whole file and the file is written again with that type: the result
    is what one read of the whole file would give, at the memory of one chunk.
    """
    if header is None:  # an empty file is data with no rows: validation, not ingestion, rejects it by name
        pd.DataFrame({c.name: pd.Series(dtype="object") for c in contract.columns}).to_parquet(out, index=False)
        return 0
    parser = ChunkParser(contract, source, header)
    while True:
        try:
            return _write_chunks(_read_chunks(local, fmt, parser), parser, out)
        except Widened:
            continue  # the parser now knows the wider type; write the file again
        except IngestError:
            raise
        except Exception as exc:  # pandas and pyarrow raise many types for a malformed file
            raise IngestError(f"{source} is not readable {fmt}: {exc}", field="source") from exc


def _read_chunks(local: Path, fmt: str, parser: ChunkParser) -> Iterator[pd.DataFrame]:
    if fmt == "parquet":
        for batch in pq.ParquetFile(local).iter_batches(batch_size=CHUNK_ROWS):
            yield batch.to_pandas()
        return
    yield from pd.read_csv(local, sep=parser.delimiter, chunksize=CHUNK_ROWS, compression="infer",
                           dtype=parser.read_dtypes(), low_memory=False)


def _write_chunks(chunks: Iterator[pd.DataFrame], parser: ChunkParser, out: Path) -> int:
    parser.start()
    rows = 0
    writer: pq.ParquetWriter | None = None
    try:
        for raw in chunks:
            table = parser.parse(raw)
            if writer is None:
                writer = pq.ParquetWriter(out, table.schema)
            elif not table.schema.equals(writer.schema, check_metadata=False):
                parser.widen(writer.schema, table.schema)
            writer.write_table(table)
            rows += table.num_rows
        parser.finish()
        if writer is None:  # a header and no rows
            pd.DataFrame({c: pd.Series(dtype="object") for c in parser.columns}).to_parquet(out, index=False)
    finally:
        if writer is not None:
            writer.close()
    return rows
