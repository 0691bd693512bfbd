"""A user's CSV or Parquet file as a DuckDB view, for the contract's draft and check.

DuckDB aggregates a million rows in well under a second and reads a file larger than memory, so
both commands scan the whole file instead of a sample. A CSV is read with every column as text
(its delimiter sniffed by DuckDB): the callers cast each value themselves and count the values
that do not cast, instead of DuckDB stopping at the first surprise past its type-detection sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mlops.errors import InputError

if TYPE_CHECKING:
    import duckdb

VIEW = "source"
SUFFIXES = (".csv", ".csv.gz", ".tsv", ".parquet", ".pq")


def file_format(path: Path) -> str:
    """``csv`` or ``parquet`` from the file name; InputError naming the accepted endings otherwise."""
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz", ".tsv")):
        return "csv"
    raise InputError(f"{path} must be a CSV or Parquet file (ending in {', '.join(SUFFIXES)})", field="data")


def quote(name: str) -> str:
    """A column name as a DuckDB identifier (any name a file may hold)."""
    return '"' + name.replace('"', '""') + '"'


def literal(value: str) -> str:
    """A string as a DuckDB literal."""
    return "'" + value.replace("'", "''") + "'"


def open_source(path: Path) -> tuple[duckdb.DuckDBPyConnection, dict[str, str]]:
    """A connection holding the view ``source`` over ``path``, and its columns with their DuckDB types."""
    import duckdb

    fmt = file_format(path)
    if not path.is_file():
        raise InputError(f"data file not found: {path}", field="data")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    reader = (f"read_parquet({literal(str(path))})" if fmt == "parquet"
              else f"read_csv({literal(str(path))}, all_varchar = true, header = true)")
    try:
        con.execute(f"CREATE VIEW {VIEW} AS SELECT * FROM {reader}")
        described = con.execute(f"DESCRIBE {VIEW}").fetchall()
    except duckdb.Error as exc:
        con.close()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"{path} is not readable {fmt}: {first}", field="data") from exc
    return con, {str(row[0]): str(row[1]) for row in described}


def type_family(duckdb_type: str) -> str:
    """int, float, bool, datetime, text or other, from a DuckDB column type."""
    kind = duckdb_type.upper()
    if kind == "BOOLEAN":
        return "bool"
    if kind in {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER",
                "UBIGINT", "UHUGEINT"}:
        return "int"
    if kind in {"FLOAT", "DOUBLE", "REAL"} or kind.startswith("DECIMAL"):
        return "float"
    if kind.startswith("TIMESTAMP") or kind == "DATE":
        return "datetime"
    if kind == "VARCHAR":
        return "text"
    return "other"
