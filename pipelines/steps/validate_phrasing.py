"""What each expectation asks and what the data showed, in the contract's words.

The report and the failure message speak of columns, ranges, categories and rows, never of the
engine: an expectation GX could not evaluate (a missing column, text where numbers belong) is
reported as "not checked" with the reason taken from the contract, and GX's own message goes to
the debug log only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlops.contract import DataContract
from pipelines.steps.validate_batches import COLUMN_EXISTS, MEAN, NO_DUPLICATE_ROWS, ROW_COUNT, UNIQUE, Tally

_OBSERVED_MAX_CHARS = 200
NOT_CHECKED_MISSING = "not checked: column"  # how an expectation on a missing column is reported
_DTYPE_WORDS = {"int": "integers", "float": "numbers", "string": "text", "datetime": "times with a time zone",
                "category": "text"}
_COUNTED = {
    "expect_column_values_to_not_be_null": ("no nulls", "nulls"),
    "expect_column_values_to_be_in_type_list": ("{dtype}", "values of another type"),
    "expect_column_values_to_be_of_type": ("{dtype}", "values of another type"),
    "expect_column_values_to_be_between": ("{range}", "values outside the range"),
    "expect_column_values_to_be_in_set": ("{categories}", "values not among them"),
    UNIQUE: ("no id shared by rows that differ", "rows reuse an id of a different row"),
    NO_DUPLICATE_ROWS: ("no two rows identical", "rows are exact duplicates"),
}


def expected(tally: Tally, contract: DataContract) -> str:
    """What the contract asks of the data, for one expectation."""
    kwargs = tally.kwargs
    if tally.kind == ROW_COUNT:
        return _range(kwargs.get("min_value"), kwargs.get("max_value"), "rows")
    if tally.kind == COLUMN_EXISTS:
        return "present"
    if tally.kind == MEAN:
        return "mean " + _range(kwargs.get("min_value"), kwargs.get("max_value"), "")
    template = _COUNTED[tally.kind][0]
    text = template.format(
        dtype=_dtype_words(tally.column, contract),
        range=_range(kwargs.get("min_value"), kwargs.get("max_value"), ""),
        categories="one of " + ", ".join(map(str, kwargs.get("value_set") or [])),
    )
    mostly = float(kwargs.get("mostly", 1.0))
    if mostly < 1.0:
        text += f" (up to {100 * (1 - mostly):.3g}% others)"
    return text


def observed(tally: Tally, columns: list[str], contract: DataContract) -> str:
    """What the data showed for one expectation; the reason in the contract's words when it was not checked."""
    if tally.kind == COLUMN_EXISTS:
        return "present" if tally.success else "missing"
    if tally.not_run:
        return _not_checked(tally, columns, contract)
    if tally.kind == ROW_COUNT:
        return f"{int(tally.observed[0]):,} rows"
    if tally.kind == MEAN:
        return "no values" if tally.observed[0] is None else f"mean {_short(tally.observed[0])}"
    if tally.observed:  # a type judged on the column's dtype
        return "type " + ", ".join(dict.fromkeys(map(str, tally.observed)))
    text = f"{tally.unexpected:,} {_COUNTED[tally.kind][1]}"
    if tally.unexpected and tally.values:
        text += f" ({100 * tally.unexpected / tally.values:.3g}%)"
    sample = list(dict.fromkeys(_short(v) for v in tally.samples if v is not None))
    if sample:
        text += ", e.g. " + ", ".join(sample[:3])
    return text[:_OBSERVED_MAX_CHARS]


def _not_checked(tally: Tally, columns: list[str], contract: DataContract) -> str:
    named = tally.kwargs.get("column_list") or ([tally.column] if tally.column else [])
    missing = [c for c in named if c not in columns]
    if missing:
        are = "is" if len(missing) == 1 else "are"
        return f"{NOT_CHECKED_MISSING}{'s' if len(missing) > 1 else ''} {', '.join(missing)} {are} missing"
    if tally.column is not None:
        return f"not checked: the values of {tally.column} are not all {_dtype_words(tally.column, contract)}"
    return "not checked: the values do not have the contract's types"


def _dtype_words(column: str | None, contract: DataContract) -> str:
    names = {c.name for c in contract.columns}
    return _DTYPE_WORDS[contract.column(column).dtype] if column in names and column is not None else "values"


def _range(low: float | None, high: float | None, unit: str) -> str:
    unit = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f"between {_short(low)} and {_short(high)}{unit}"
    return f"at least {_short(low)}{unit}" if low is not None else f"at most {_short(high)}{unit}"


def _short(value: Any) -> str:
    if isinstance(value, Mapping) and value:  # a whole row (duplicate rows): its first column names it
        key, first = next(iter(value.items()))
        return f"{key}={first}"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
