"""One chunk of a source as the contract reads it: UTC times, the 0/1 spellings, types fixed for the file.

The ingest streams a source through :class:`ChunkParser` chunk by chunk. What one read of the whole
file would decide from all rows at once (a column's type, whether its times mix offsets) the parser
decides across chunks: counts carry over, and a type that changes between chunks is widened for
the whole file (integers and floats to float, anything else to text, as pandas does on one read).
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from mlops.contract import DataContract
from mlops.data.source_columns import Header
from mlops.errors import IngestError

# A time of day followed by Z, UTC or a numeric offset; a bare date never has an offset.
_OFFSET_SUFFIX = r"\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\s*(?:Z|UTC|[+-]\d{2}(?::?\d{2})?)$"


class Widened(Exception):  # noqa: N818 - a signal to write the file again, not an error
    """A column's type changed between chunks; the parser has widened it and the file is read again."""


class _TimeForms:
    """How many times of a column carried a UTC offset and how many did not, with a first example of each."""

    def __init__(self) -> None:
        self.aware = self.naive = 0
        self.aware_example = self.naive_example = ""

    def count(self, text: pd.Series) -> None:
        with_offset = text.str.contains(_OFFSET_SUFFIX, case=False, regex=True)
        aware, naive = text[with_offset], text[~with_offset]
        if len(aware) and not self.aware:
            self.aware_example = str(aware.iloc[0])
        if len(naive) and not self.naive:
            self.naive_example = str(naive.iloc[0])
        self.aware += len(aware)
        self.naive += len(naive)


class ChunkParser:
    """Parses the chunks of one source; :meth:`start` before each pass, :meth:`finish` after it."""

    def __init__(self, contract: DataContract, source: str, header: Header) -> None:
        self.contract, self.source, self.columns, self.delimiter = contract, source, header.columns, header.delimiter
        self._types: dict[str, pa.DataType] = {}
        self._times = _TimeForms()

    def start(self) -> None:
        self._times = _TimeForms()

    def read_dtypes(self) -> dict[str, type[str]]:
        """pandas read types for a CSV: times and widened-to-text columns as their text, unparsed."""
        text = {name for name, kind in self._types.items() if pa.types.is_string(kind)}
        return {name: str for name in {*text, self.contract.timestamp_column}}

    def parse(self, raw: pd.DataFrame) -> pa.Table:
        """The chunk as the snapshot stores it (Arrow, with the file's widened types)."""
        ts = self.contract.timestamp_column
        raw[ts] = self._utc_times(raw[ts])
        for col in self.contract.columns:
            # Once a chunk kept its spellings, the whole file does (as one read of it would).
            if col.true_values and not pa.types.is_string(self._types.get(col.name, pa.null())):
                raw[col.name] = _zero_one(raw[col.name], col.true_values, col.false_values)
        table = pa.Table.from_pandas(raw, preserve_index=False)
        for name, kind in self._types.items():
            i = table.schema.get_field_index(name)
            if table.schema.field(i).type != kind:
                table = table.set_column(i, name, table.column(i).cast(kind))
        return table

    def widen(self, written: pa.Schema, chunk: pa.Schema) -> None:
        """Record the wider type of every column whose type differs from what was written; raise Widened."""
        for field in chunk:
            before = written.field(field.name).type
            if field.type != before:
                numeric = all(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t)
                              for t in (before, field.type))
                self._types[field.name] = pa.float64() if numeric else pa.string()
        raise Widened

    def finish(self) -> None:
        """After the last chunk: refuse a column whose times mix offsets, counted over the whole file."""
        forms = self._times
        if forms.aware and forms.naive:
            name = self.contract.timestamp_column
            raise IngestError(
                f"{self.source}: column {name} mixes times with a UTC offset ({forms.aware:,} rows, e.g. "
                f"{forms.aware_example!r}) and times without one ({forms.naive:,} rows, e.g. {forms.naive_example!r}); "
                "a time without an offset is ambiguous: give every time an offset, or none (then they are read as UTC)",
                field=name)

    def _utc_times(self, values: pd.Series) -> pd.Series:
        """Times as UTC; the offsets' forms are counted for :meth:`finish`."""
        if pd.api.types.is_datetime64_any_dtype(values) or not pd.api.types.is_object_dtype(values):
            return pd.to_datetime(values, utc=True, errors="coerce")
        self._times.count(values.dropna().astype(str).str.strip())
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
    if not mapped.map(lambda v: type(v) is int).all():  # an unlisted spelling or a null: the values stay visible
        return values
    return mapped.astype("int64")
