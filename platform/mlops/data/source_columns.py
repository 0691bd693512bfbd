"""A source's column names, read from its header alone, checked against the contract's columns.

Reading a CSV's first line or a Parquet file's schema takes milliseconds whatever the file's size,
so a missing or misnamed contract column stops ``mlops data ingest`` and ``mlops pipeline run``
at once, in one line naming the column, before any row is parsed. Only the standard library at
import time (pyarrow is imported for a Parquet schema only): the CLI runs this before pandas.
"""

from __future__ import annotations

import difflib
import gzip
import logging
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from mlops.contract import DataContract
from mlops.errors import IngestError
from mlops.preflight import source_format

log = logging.getLogger("mlops.data.ingest")
DELIMITERS = (",", ";", "\t", "|")


def sniff_delimiter(header: str, contract: DataContract, source: str) -> str:
    """The delimiter that splits the header into the most contract columns (ties: the comma)."""
    names = {c.name for c in contract.columns}
    best = max(DELIMITERS, key=lambda d: len(names & set(_split(header, d))))
    if best != ",":
        log.info("%s looks %r-delimited (its header splits into the contract's columns); read it so", source, best)
    return best


class Header(NamedTuple):
    columns: list[str]
    delimiter: str  # a CSV's, sniffed; "," for Parquet


def read_header(path: Path, fmt: str, contract: DataContract, source: str) -> Header | None:
    """The column names of a local file (and a CSV's delimiter), from its header; None for an empty file."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return Header(list(pq.read_schema(path).names), ",")
        except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
            raise IngestError(f"{source} is not readable parquet: {exc}", field="source") from exc
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            first = handle.readline()
    except (OSError, EOFError) as exc:
        raise IngestError(f"{source} is not readable csv: {exc}", field="source") from exc
    header = first.decode("utf-8", errors="replace").rstrip("\r\n").lstrip("\ufeff")
    if not header.strip():
        return None
    delimiter = sniff_delimiter(header, contract, source)
    return Header(_split(header, delimiter), delimiter)


def check_columns(columns: list[str], contract: DataContract, source: str) -> None:
    """IngestError, one line, naming each contract column the source lacks and its likely misspelling."""
    missing = [c.name for c in contract.columns if c.name not in columns]
    if not missing:
        return
    extra = [c for c in columns if c not in {col.name for col in contract.columns}]
    named = []
    for name in missing:
        lookalike = _lookalike(name, extra)
        named.append(f"{name} (found {lookalike!r}: rename it)" if lookalike else name)
    noun = "column" if len(missing) == 1 else "columns"
    raise IngestError(f"{source} lacks the {noun} {', '.join(named)} of contract {contract.name!r}; "
                      f"its columns are {', '.join(columns) or 'none'}", field=missing[0])


def check_source_columns(source: str, contract: DataContract) -> None:
    """The header check for a local file (remote sources are checked by ingest as they are read)."""
    parts = urlsplit(source)
    if parts.scheme not in ("", "file"):
        return
    path = Path(parts.path if parts.scheme else source).expanduser()
    header = read_header(path, source_format(source), contract, source)
    if header is not None:
        check_columns(header.columns, contract, source)


def _split(header: str, delimiter: str) -> list[str]:
    return [f.strip().strip('"') for f in header.split(delimiter)]


def _lookalike(name: str, candidates: list[str]) -> str | None:
    """The source column that is most likely ``name`` misspelled (case, separators, a typo)."""
    def folded(text: str) -> str:
        return text.lower().replace("_", "").replace("-", "").replace(" ", "")

    by_fold = {folded(c): c for c in candidates}
    if folded(name) in by_fold:
        return by_fold[folded(name)]
    close = difflib.get_close_matches(folded(name), list(by_fold), n=1, cutoff=0.6)
    return by_fold[close[0]] if close else None
