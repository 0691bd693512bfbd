"""Draft a data contract from a user's CSV or Parquet file: ``mlops contract draft DATA --out FILE``.

The draft is a starting point a person edits, not a verdict; its header says so. Everything is read
in two DuckDB passes over the whole file (no sample), so a few million rows take seconds:

- dtype: int, float, datetime or string from the file's types (a CSV's text is cast value by value:
  a column is int when every value is an integer, and stays string when a value has a leading zero); a
  true/false column becomes a 0/1 int with its spellings. A string column with at most
  ``CATEGORY_CUT`` distinct values that is not an id becomes a category listing them.
- nullable: the column holds a null.
- min/max: the observed minimum and maximum widened outward to two significant digits (a
  non-negative column starts at 0), so the data it was drafted from passes ``mlops contract check``;
  the header shows the 0.1% and 99.9% quantiles beside them, to tighten by hand.
- id column: the first column named like an id (``id``, ``*_id``, ``*Id``) with a distinct value in
  every row (else the first such column of any name); timestamp: the first datetime column; label:
  ``--label``, else the first 0/1 column named like ``label``, ``is_*``, ``target``, ``*fraud*``,
  ``class``.
- entities: the other id-like int/string columns with repeated values and at least
  ``ENTITY_MIN_DISTINCT`` distinct ones (a customer, a terminal); each gets counts over 1h/24h/7d,
  the mean over 7d and max over 24h of the main numeric column, and the seconds since its previous
  event (30d).
- model inputs: the numeric columns and the categories that are none of id, entity, timestamp, label.
- label_rate: a quarter to four times the observed rate; min_rows: half the rows, at most 1,000.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlops.contract import DataContract
from mlops.data.duck_source import VIEW, open_source, quote, type_family
from mlops.errors import InputError

LABEL_DELAY = "7d"  # how late the draft assumes labels arrive; the header asks to set it
INT_PATTERN = r"^\s*[-+]?[0-9]+\s*$"  # a CSV value that is an integer (DuckDB's cast would round 51.72)
CATEGORY_CUT = 50
ENTITY_MIN_DISTINCT = 10
UNKNOWN_CATEGORY_TOLERANCE = 0.001
TIME_FEATURES = ("hour_of_day_sin", "hour_of_day_cos", "day_of_week_sin", "day_of_week_cos")
_LABEL_LIKE = re.compile(r"^(label|target|class|y)$|^is_|fraud|_label$|^label_|_target$", re.IGNORECASE)
_MAIN_NUMERIC = re.compile(r"amount|amt|value|price|total|sum", re.IGNORECASE)


@dataclass
class _Profile:
    name: str
    kind: str  # int, float, bool, datetime, string
    non_null: int
    distinct: int
    low: float | None = None
    high: float | None = None
    quantiles: tuple[float, float, float] | None = None  # 0.1%, 50%, 99.9%
    mean: float | None = None
    values: tuple[str, ...] | None = None  # the distinct values of a low-cardinality string column
    true_values: tuple[str, ...] = ()
    false_values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Draft:
    contract: DataContract
    text: str  # the YAML to write, with its header
    rows: int
    skipped: tuple[str, ...]  # columns of a type a contract cannot hold (lists, structs, blobs)


def id_like(name: str) -> bool:
    """``id``, ``customer_id``, ``CUSTOMER_ID``, ``customerId``, ``uuid`` (not ``paid``)."""
    lower = name.lower()
    if lower in {"id", "uuid", "guid"} or lower.endswith(("_id", "-id", " id", "_uuid")):
        return True
    return name.endswith(("Id", "ID")) and len(name) > 2


def draft_contract(path: Path, *, label: str | None = None, name: str | None = None) -> Draft:
    """Read ``path`` and draft a contract for it; InputError when it lacks an id, a timestamp or a label."""
    con, types = open_source(path)
    try:
        rows, profiles, skipped = _profile(con, types)
    finally:
        con.close()
    if rows == 0:
        raise InputError(f"{path} has no rows: a contract is drafted from data", field="data")
    body = _contract_body(path, rows, profiles, label, name)
    contract = DataContract.model_validate(body)
    return Draft(contract, _header(path, rows, profiles, skipped) + _dump(body), rows, tuple(skipped))


def _profile(con: Any, types: dict[str, str]) -> tuple[int, list[_Profile], list[str]]:
    """Each column's kind, null and distinct counts, range and quantiles (two passes)."""
    columns = [c for c, t in types.items() if type_family(t) != "other"]
    skipped = [c for c in types if c not in columns]
    first: list[str] = ["count(*)"]
    for column in columns:
        q = quote(column)
        first += [f"count({q})", f"count(DISTINCT {q})"]
        if type_family(types[column]) == "text":
            first += [f"count(*) FILTER (WHERE regexp_matches({q}, '{INT_PATTERN}'))",
                      f"count(*) FILTER (WHERE regexp_matches({q}, '^\\s*[-+]?0[0-9]'))",
                      f"count(try_cast({q} AS DOUBLE))", f"count(try_cast({q} AS TIMESTAMPTZ))",
                      f"count(try_cast({q} AS BOOLEAN))"]
    counts = list(con.execute(f"SELECT {', '.join(first)} FROM {VIEW}").fetchone())
    rows = int(counts.pop(0))
    profiles = []
    for column in columns:
        non_null, distinct = int(counts.pop(0)), int(counts.pop(0))
        family = type_family(types[column])
        kind = {"int": "int", "float": "float", "bool": "bool", "datetime": "datetime"}.get(family, "string")
        if family == "text":
            as_int, lead_zero, as_float, as_time, as_bool = (int(counts.pop(0)) for _ in range(5))
            if non_null == 0 or lead_zero:  # 007 is a code, not a number
                kind = "string"
            elif as_int == non_null:
                kind = "int"
            elif as_float == non_null:
                kind = "float"
            elif as_time == non_null:
                kind = "datetime"
            elif as_bool == non_null and distinct <= 4:
                kind = "bool"
        profiles.append(_Profile(column, kind, non_null, distinct))
    second: list[str] = []
    wanted: list[tuple[_Profile, str]] = []
    for prof in profiles:
        q = quote(prof.name)
        if prof.kind in ("int", "float"):
            typed = f"try_cast({q} AS {'BIGINT' if prof.kind == 'int' else 'DOUBLE'})"
            second.append(f"[min({typed}), max({typed}), avg({typed})] || quantile_cont({typed}, [0.001, 0.5, 0.999])")
            wanted.append((prof, "range"))
        elif prof.kind == "bool":
            truth = f"try_cast({q} AS BOOLEAN)"
            spelled = f"lower(trim(CAST({q} AS VARCHAR)))"
            second.append(f"list(DISTINCT {spelled}) FILTER (WHERE {truth})")
            second.append(f"list(DISTINCT {spelled}) FILTER (WHERE NOT {truth})")
            second.append(f"avg(CAST({truth} AS INTEGER))")
            wanted += [(prof, "true"), (prof, "false"), (prof, "mean")]
        elif prof.kind == "string" and 0 < prof.distinct <= CATEGORY_CUT:
            second.append(f"list(DISTINCT CAST({q} AS VARCHAR))")
            wanted.append((prof, "values"))
    if second:
        results = con.execute(f"SELECT {', '.join(second)} FROM {VIEW}").fetchone()
        for (prof, what), value in zip(wanted, results, strict=True):
            if what == "range" and value[0] is not None:
                prof.low, prof.high, prof.mean = float(value[0]), float(value[1]), float(value[2])
                prof.quantiles = (float(value[3]), float(value[4]), float(value[5]))
            elif what == "mean":
                prof.mean = None if value is None else float(value)
            elif what == "true":
                prof.true_values = tuple(sorted(value or ()))
            elif what == "false":
                prof.false_values = tuple(sorted(value or ()))
            elif what == "values":
                prof.values = tuple(sorted(str(v) for v in value))
    return rows, profiles, skipped


def _binary(prof: _Profile) -> bool:
    if prof.kind == "bool":
        return True
    return prof.kind == "int" and prof.low is not None and prof.low >= 0 and prof.high is not None and prof.high <= 1


def _pick_label(profiles: list[_Profile], label: str | None) -> _Profile:
    if label is not None:
        found = next((p for p in profiles if p.name == label), None)
        if found is None:
            raise InputError(f"--label {label!r} is not a column of the data; its columns are "
                             f"{', '.join(p.name for p in profiles)}", field="label")
        if not _binary(found):
            raise InputError(f"label column {label!r} must hold 0/1 (or true/false) values", field="label")
        return found
    for prof in profiles:
        if _LABEL_LIKE.search(prof.name) and _binary(prof) and prof.non_null > 0:
            return prof
    raise InputError("no 0/1 label column found by name (label, is_*, target, *fraud*, class): name it with --label",
                     field="label")


def _contract_body(path: Path, rows: int, profiles: list[_Profile], label: str | None,
                   name: str | None) -> dict[str, Any]:
    label_prof = _pick_label(profiles, label)
    keyish = [p for p in profiles if p.kind in ("int", "string") and p is not label_prof]
    unique = [p for p in keyish if p.non_null == rows and p.distinct == rows]
    id_prof = next((p for p in unique if id_like(p.name)), unique[0] if unique else None)
    if id_prof is None:
        raise InputError("no int or string column has a distinct value in every row: a contract needs an id column "
                         "(add one, e.g. a row number)", field="id_column")
    time_prof = next((p for p in profiles if p.kind == "datetime" and p is not id_prof), None)
    if time_prof is None:
        raise InputError("no column holds dates or times: a contract needs a timestamp column",
                         field="timestamp_column")
    entity_profs = [p for p in keyish if p is not id_prof and id_like(p.name) and p.distinct < p.non_null
                    and p.distinct >= ENTITY_MIN_DISTINCT]
    roles = {id_prof.name, time_prof.name, label_prof.name} | {p.name for p in entity_profs}

    columns: list[dict[str, Any]] = []
    numeric: list[dict[str, Any]] = []
    categorical: list[str] = []
    logged: set[str] = set()
    for prof in profiles:
        column: dict[str, Any] = {"name": prof.name}
        is_category = (prof.kind == "string" and prof.name not in roles and prof.values is not None
                       and prof.distinct < max(rows, 2))
        column["dtype"] = "category" if is_category else ("int" if prof.kind == "bool" else prof.kind)
        if prof.non_null < rows:
            column["nullable"] = True
        if _binary(prof) and (prof is label_prof or prof.kind == "bool"):
            column["min"], column["max"] = 0, 1
            if prof.kind == "bool":
                column["true_values"] = list(prof.true_values or ("true",))
                column["false_values"] = list(prof.false_values or ("false",))
        elif prof.kind in ("int", "float") and prof.name not in roles and prof.low is not None:
            column["min"], column["max"] = _bounds(prof)
        if is_category:
            column["categories"] = list(prof.values or ())
            categorical.append(prof.name)
        if prof is id_prof:
            column["unique"] = True
        columns.append(column)
        if prof.name in roles or id_like(prof.name):
            continue
        if prof.kind in ("int", "float", "bool"):
            skewed = (prof.kind != "bool" and not _binary(prof) and prof.low is not None and prof.low >= 0
                      and prof.quantiles is not None and prof.quantiles[2] >= 10 * max(prof.quantiles[1], 1e-9))
            numeric.append({"name": prof.name, "log1p": True} if skewed else {"name": prof.name})
            if skewed:
                logged.add(prof.name)

    main = _main_numeric(profiles, [n["name"] for n in numeric])
    non_negative = {p.name for p in profiles if p.low is not None and p.low >= 0}
    taken = {p.name for p in profiles}
    entities: list[dict[str, str]] = []
    views: list[dict[str, Any]] = []
    for prof in entity_profs:
        entity = _unique_name(_entity_name(prof.name), {e["name"] for e in entities})
        entities.append({"name": entity, "join_key": prof.name})
        features: list[dict[str, Any]] = [{"name": f"{entity}_count_{w}", "agg": "count", "window": w}
                                          for w in ("1h", "24h", "7d")]
        if main is not None:
            stem = _slug(main, "_")
            features += [{"name": f"{entity}_{stem}_mean_7d", "agg": "mean", "column": main, "window": "7d"},
                         {"name": f"{entity}_{stem}_max_24h", "agg": "max", "column": main, "window": "24h"}]
            if main in non_negative:  # the value against the entity's own habit (a ratio needs values >= 0)
                features.append({"name": f"{entity}_{stem}_ratio_7d", "agg": "ratio_to_mean", "column": main,
                                 "window": "7d"})
        features.append({"name": f"{entity}_seconds_since_previous", "agg": "seconds_since_previous", "window": "30d"})
        # The entity's own record of positives, as known LABEL_DELAY after each event (never inside it).
        label_stem = _slug(label_prof.name, "_").lower()
        features += [{"name": f"{entity}_{label_stem}_rate_{w}", "agg": "label_rate", "window": w, "delay": LABEL_DELAY}
                     for w in ("1d", "7d", "30d")]
        for feature in features:
            feature["name"] = _unique_name(feature["name"], taken)
            taken.add(feature["name"])
        views.append({"entity": entity, "features": features})
    log_features = [f["name"] for v in views for f in v["features"]
                    if f["agg"] == "seconds_since_previous" or (f.get("column") in logged and f["agg"] != "count")]

    rate = label_prof.mean or 0.0
    return {
        "name": name or _slug(path.name.split(".")[0], "-") or "my-data",
        "id_column": id_prof.name,
        "timestamp_column": time_prof.name,
        "label_column": label_prof.name,
        "entities": entities,
        "columns": columns,
        "min_rows": max(1, min(1000, rows // 2)),
        "label_rate": {"min": _round(rate / 4, up=False), "max": min(1.0, _round(rate * 4, up=True))},
        "unknown_category_tolerance": UNKNOWN_CATEGORY_TOLERANCE,
        "feature_views": views,
        "time_features": list(TIME_FEATURES),
        "model_inputs": {"numeric": numeric, "categorical": categorical, "log1p_features": log_features},
        "split": {"validation_fraction": 0.15, "test_fraction": 0.15},
    }


def _round(value: float, *, up: bool) -> float:
    """``value`` rounded outward (up or down) to two significant digits."""
    if value == 0 or not math.isfinite(value):
        return 0.0 if not math.isfinite(value) else value
    step = 10.0 ** (math.floor(math.log10(abs(value))) - 1)
    rounded = (math.ceil(value / step) if up else math.floor(value / step)) * step
    return float(f"{rounded:.12g}")


def _bounds(prof: _Profile) -> tuple[float, float]:
    """The observed range widened outward to two significant digits; a non-negative column starts at 0."""
    low, high = float(prof.low or 0.0), float(prof.high or 0.0)
    lower = 0.0 if low >= 0 else _round(low, up=False)
    upper = _round(high, up=True)
    if prof.kind == "int":
        return math.floor(lower), math.ceil(upper)
    return lower, upper


def _main_numeric(profiles: list[_Profile], inputs: list[str]) -> str | None:
    """The numeric input the window features aggregate: one named like an amount, else the first float."""
    by_name = {p.name: p for p in profiles}
    candidates = [n for n in inputs if by_name[n].kind in ("int", "float") and not _binary(by_name[n])]
    named = [n for n in candidates if _MAIN_NUMERIC.search(n)]
    floats = [n for n in candidates if by_name[n].kind == "float"]
    chosen = named or floats or candidates
    return chosen[0] if chosen else None


def _slug(text: str, sep: str) -> str:
    return re.sub(r"[^a-z0-9]+", sep, text.lower()).strip(sep)


def _entity_name(join_key: str) -> str:
    """``customer`` for customer_id, CUSTOMER_ID, customerId."""
    stem = re.sub(r"(_|-|\s)?(id|uuid)$", "", join_key, flags=re.IGNORECASE)
    return _slug(stem, "_") or _slug(join_key, "_") or "entity"


def _unique_name(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}_{n}", n + 1
    return candidate


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _header(path: Path, rows: int, profiles: list[_Profile], skipped: list[str]) -> str:
    lines = [
        f"# DRAFT data contract, made by `mlops contract draft` from {path.name} ({rows:,} rows).",
        "# It is a starting point: read and edit every line before training on it. In particular check",
        "# the id, timestamp and label columns, the entities and their window features, the model inputs,",
        "# each range (the observed min/max widened to two significant digits; quantiles below) and",
        "# label_rate (a quarter to four times the observed rate). The *_rate_* label features assume every",
        f"# label is known {LABEL_DELAY} after its event (delay: {LABEL_DELAY}): set the delay to how late yours",
        "# arrive (a feature never sees a label inside its delay). Then: mlops contract check DATA THIS_FILE",
        "#",
        "# observed per column: kind, nulls, distinct values, min / 0.1% / median / 99.9% / max",
    ]
    for prof in profiles:
        stats = f"{prof.kind}, {rows - prof.non_null:,} nulls, {prof.distinct:,} distinct"
        if prof.quantiles is not None:
            q = prof.quantiles
            stats += (f", {_fmt(prof.low)} / {_fmt(q[0])} / {_fmt(q[1])} / {_fmt(q[2])} / {_fmt(prof.high)}")
        lines.append(f"#   {prof.name}: {stats}")
    if skipped:
        lines.append(f"# left out (lists, structs or binary, which a contract cannot hold): {', '.join(skipped)}")
    return "\n".join(lines) + "\n"


def _dump(body: dict[str, Any]) -> str:
    return yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True)
