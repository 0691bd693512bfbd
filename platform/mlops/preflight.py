"""Checks that refuse, in milliseconds and before any pipeline starts, what cannot work.

Only the standard library here: the CLI runs these before importing kfp, pandas or MLflow, so a
missing file or an unreachable server is reported in about a second, not after a minute.
"""

from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlsplit

from mlops.errors import IngestError, PipelineError, RegistryError

_FORMATS = ((".parquet", "parquet"), (".pq", "parquet"), (".csv", "csv"), (".csv.gz", "csv"))
CONNECT_TIMEOUT_S = 5.0


def source_format(source: str) -> str:
    """``csv`` or ``parquet``, from the name; IngestError for anything else."""
    name = source.lower().split("?", 1)[0]
    for suffix, fmt in _FORMATS:
        if name.endswith(suffix):
            return fmt
    raise IngestError(f"cannot tell the format of {source}: use a .csv or .parquet name", field="source")


def check_source(source: str) -> None:
    """An unknown format or a missing local file; remote sources are only read by ingest."""
    source_format(source)
    parts = urlsplit(source)
    if parts.scheme in ("", "file") and not Path(parts.path if parts.scheme else source).expanduser().is_file():
        raise IngestError(f"source not found: {source}", field="source")


def connection_failure(exc: BaseException) -> str | None:
    """The failed connection behind ``exc``, if any (fsspec's HTTP layer reports one as "not found")."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve the host ({cause.strerror})"
        if isinstance(cause, (ConnectionError, TimeoutError)):
            return f"connection failed ({cause})"
        cause = cause.__cause__ or cause.__context__
    return None


def check_tracking_server(uri: str) -> None:
    """An MLflow server that does not answer would otherwise surface after minutes of retries."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or parts.hostname is None:
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = connection_failure(exc) or str(exc)
        raise PipelineError(f"cannot reach the MLflow tracking server at {uri}: {reason}") from exc


def local_store_path(uri: str) -> Path | None:
    """The file (SQLite) or folder (file store) a local tracking URI names; None for a server."""
    parts = urlsplit(uri)
    if parts.scheme == "sqlite":
        database = uri.split("://", 1)[1].split("?", 1)[0]
        return Path(database[1:]) if database.startswith("/") else None  # sqlite:// alone: in memory
    if parts.scheme in ("", "file"):
        return Path(parts.path if parts.scheme else uri).expanduser()
    return None


def check_tracking_store(uri: str) -> None:
    """A local tracking store must exist: MLflow would silently create an empty one (and register v1 there)."""
    path = local_store_path(uri)
    if path is not None and not path.exists():
        raise RegistryError(f"no tracking store at {path}: restore it, or create a new one on purpose "
                            "with `mlops init`", field="tracking_uri")
