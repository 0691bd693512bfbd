"""Every mismatch between a data file and a contract, one line each: ``mlops contract check DATA CONTRACT``.

A quick answer for a user bringing their own data, before ingest and the pipeline's Great Expectations
validation (which stays the gate of record): one DuckDB pass aggregates every column's checks (a few
seconds on a million rows) and a second counts exact duplicate rows. Neither Great Expectations nor
MLflow is imported.

Problems (each fails the check): a contract column the file lacks, values of another dtype, timestamps
that do not parse, values outside a column's min/max, nulls in a column that is not nullable, values
outside a category's list above ``unknown_category_tolerance``, a repeated value in a unique column,
rows repeated exactly (unless ``allow_duplicate_rows``), a label rate outside ``label_rate``, fewer rows
than ``min_rows``. Notes (informative only): columns the contract does not declare.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlops.contract import Column, DataContract
from mlops.data.duck_source import VIEW, literal, open_source, quote, type_family
from mlops.data.source_columns import _lookalike

INT_PATTERN = r"^\s*[-+]?[0-9]+\s*$"


@dataclass
class CheckReport:
    rows: int
    columns: int
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Probe:
    """The aggregates of one column, in the order they sit in the SELECT."""

    column: Column
    typed: str  # the value as the contract's dtype (NULL where it does not cast)
    bad: str | None  # the condition of a value that is not of the contract's dtype
    aggregates: list[tuple[str, str]] = field(default_factory=list)  # (what, SQL)


def check_data(path: Path, contract: DataContract) -> CheckReport:
    """Check ``path`` (CSV or Parquet) against ``contract``; InputError when the file cannot be read."""
    con, types = open_source(path)
    try:
        return _check(con, types, contract)
    finally:
        con.close()


def _check(con: Any, types: dict[str, str], contract: DataContract) -> CheckReport:
    declared = {c.name for c in contract.columns}
    present = [c for c in contract.columns if c.name in types]
    problems: list[str] = []
    extra = [name for name in types if name not in declared]
    for column in contract.columns:
        if column.name not in types:
            lookalike = _lookalike(column.name, extra)
            found = f" (found {lookalike!r}: rename it)" if lookalike else ""
            problems.append(f"missing column {column.name}{found}")
    notes = [f"extra column {name}: not in the contract (ignored)" for name in extra]

    probes = []
    for column in present:
        probe = _probe(column, types[column.name], contract)
        if isinstance(probe, str):
            problems.append(probe)
            continue
        probes.append(probe)
    select = ["count(*)"] + [sql for p in probes for _, sql in p.aggregates]
    values = list(con.execute(f"SELECT {', '.join(select)} FROM {VIEW}").fetchone())
    rows = int(values.pop(0))
    for probe in probes:
        aggregated = {what: values.pop(0) for what, _ in probe.aggregates}
        problems += _judge(probe.column, aggregated, rows, contract)
    if rows < contract.min_rows:
        problems.append(f"{rows:,} rows, fewer than min_rows {contract.min_rows:,}")
    if not contract.allow_duplicate_rows and rows:
        distinct = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT * FROM {VIEW})").fetchone()[0]
        if distinct < rows:
            problems.append(f"{rows - int(distinct):,} rows repeat another row exactly (allow_duplicate_rows is false)")
    return CheckReport(rows, len(types), problems, notes)


def _probe(column: Column, duck_type: str, contract: DataContract) -> _Probe | str:
    """The SQL that checks one column, or the line saying its type cannot hold the contract's dtype."""
    q, family = quote(column.name), type_family(duck_type)
    text = f"CAST({q} AS VARCHAR)"
    wrong_type = f"column {column.name}: the file holds {duck_type} values, the contract says {column.dtype}"
    bad: str | None = None
    if column.dtype == "int":
        if family in ("int", "bool"):
            typed = f"CAST({q} AS BIGINT)"
        elif family == "float":
            typed, bad = f"CAST({q} AS BIGINT)", f"{q} <> floor({q})"
        elif family == "text":
            spelled = f"lower(trim({q}))"
            cases = ""
            if column.true_values:
                cases += f" WHEN {spelled} IN ({', '.join(literal(v.lower()) for v in column.true_values)}) THEN 1"
                cases += f" WHEN {spelled} IN ({', '.join(literal(v.lower()) for v in column.false_values)}) THEN 0"
            typed = f"(CASE{cases} WHEN regexp_matches({q}, '{INT_PATTERN}') THEN try_cast({q} AS BIGINT) END)"
        else:
            return wrong_type
    elif column.dtype == "float":
        if family in ("int", "float", "bool"):
            typed = f"CAST({q} AS DOUBLE)"
        elif family == "text":
            typed = f"try_cast({q} AS DOUBLE)"
        else:
            return wrong_type
    elif column.dtype == "datetime":
        if family == "datetime":
            typed = q
        elif family == "text":
            typed = f"try_cast({q} AS TIMESTAMPTZ)"
        else:
            return wrong_type
    else:  # string and category: any value has a text form
        typed = text if family != "text" else q
    if bad is None and typed not in (q, text) and not typed.startswith("CAST"):
        bad = f"{q} IS NOT NULL AND {typed} IS NULL"
    probe = _Probe(column, typed, bad)
    add = probe.aggregates.append
    add(("non_null", f"count({q})"))
    if bad is not None:
        add(("bad", f"count(*) FILTER (WHERE {bad})"))
        add(("bad_example", f"any_value({text}) FILTER (WHERE {bad})"))
    if column.dtype in ("int", "float") and (column.min is not None or column.max is not None):
        outside = " OR ".join(([f"{typed} < {column.min!r}"] if column.min is not None else [])
                              + ([f"{typed} > {column.max!r}"] if column.max is not None else []))
        add(("outside", f"count(*) FILTER (WHERE {outside})"))
        add(("low", f"min({typed})"))
        add(("high", f"max({typed})"))
    if column.categories is not None:
        listed = ", ".join(literal(c) for c in column.categories) or "NULL"
        unknown = f"{typed} IS NOT NULL AND {typed} NOT IN ({listed})"
        add(("unknown", f"count(*) FILTER (WHERE {unknown})"))
        add(("unknown_examples", f"list_slice(list(DISTINCT {typed}) FILTER (WHERE {unknown}), 1, 3)"))
    if column.unique:
        add(("distinct", f"count(DISTINCT {q})"))
    if column.name == contract.label_column and column.dtype in ("int", "float"):
        add(("rate", f"avg({typed})"))
    return probe


def _judge(column: Column, found: dict[str, Any], rows: int, contract: DataContract) -> list[str]:
    name, lines = column.name, []
    non_null = int(found["non_null"])
    if non_null < rows and not column.nullable:
        lines.append(f"column {name}: {rows - non_null:,} nulls, and the contract says it is not nullable")
    if found.get("bad"):
        what = "parseable timestamps" if column.dtype == "datetime" else f"{column.dtype} values"
        example = found["bad_example"]
        lines.append(f"column {name}: {int(found['bad']):,} values are not {what} (e.g. {example!r})")
    if found.get("outside"):
        lines.append(f"column {name}: {int(found['outside']):,} values outside [{_num(column.min)}, {_num(column.max)}]"
                     f" (observed {_num(found['low'])} to {_num(found['high'])})")
    if found.get("unknown"):
        share = int(found["unknown"]) / max(non_null, 1)
        if share > contract.unknown_category_tolerance:
            examples = ", ".join(repr(v) for v in found["unknown_examples"])
            lines.append(f"column {name}: {int(found['unknown']):,} values ({share:.2%}) are not among its categories,"
                         f" above the tolerance {contract.unknown_category_tolerance:g} (e.g. {examples})")
    if "distinct" in found and int(found["distinct"]) < non_null:
        lines.append(f"column {name}: {non_null - int(found['distinct']):,} repeated values in a unique column")
    if found.get("rate") is not None:
        rate, band = float(found["rate"]), contract.label_rate
        if not band.min <= rate <= band.max:
            lines.append(f"label {name}: rate {rate:.4g} outside label_rate [{band.min:g}, {band.max:g}]")
    return lines


def _num(value: Any) -> str:
    return "-inf/+inf" if value is None else f"{float(value):g}"
