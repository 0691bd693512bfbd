"""Ingest's parsing decisions on small hand-written files: times outside ISO 8601, offsets spelled
in lower case, zone-aware Parquet, text columns of digits, the snapshot's own files."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from mlops.contract import DataContract
from mlops.data.ingest import ingest
from mlops.errors import IngestError

pytestmark = pytest.mark.unit

HEADER = "transaction_id,customer_id,merchant_id,event_timestamp,amount,merchant_category,channel,country,is_fraud"


def _csv(tmp_path: Path, times: list[str], merchants: list[str] | None = None) -> Path:
    merchants = merchants or ["M1"] * len(times)
    rows = [f"T{i},C1,{m},{t},1.0,fuel,pos,US,0" for i, (t, m) in enumerate(zip(times, merchants, strict=True))]
    source = tmp_path / "tx.csv"
    source.write_text("\n".join([HEADER, *rows]) + "\n")
    return source


def _stored(source: Path, tmp_path: Path, contract: DataContract) -> pd.DataFrame:
    return pd.read_parquet(ingest(str(source), tmp_path / "snapshots", contract).path)


def test_times_outside_iso_8601_are_parsed_one_by_one(tmp_path: Path, contract: DataContract) -> None:
    times = ["2026-01-01 10:00:00", "March 1 2026 10:30", "2026/01/03 11:00", "Jan 4 2026 9:15 PM", "not a time", ""]
    stored = _stored(_csv(tmp_path, times), tmp_path, contract)
    expected = ["2026-01-01 10:00", "2026-03-01 10:30", "2026-01-03 11:00", "2026-01-04 21:15", None, None]
    assert stored["event_timestamp"].tolist() == [pd.Timestamp(t, tz="UTC") if t else pd.NaT for t in expected]


@pytest.mark.parametrize("aware", ["2026-01-01T10:00:00z", "2026-01-01 10:00:00 utc"])
def test_offsets_in_lower_case_still_count_when_times_mix(tmp_path: Path, contract: DataContract, aware: str) -> None:
    source = _csv(tmp_path, [aware, "2026-01-01 11:00:00"])
    with pytest.raises(IngestError) as raised:
        ingest(str(source), tmp_path / "snapshots", contract)
    assert raised.value.message == (
        f"{source}: column event_timestamp mixes times with a UTC offset (1 rows, e.g. {aware!r}) and times "
        "without one (1 rows, e.g. '2026-01-01 11:00:00'); a time without an offset is ambiguous: give every "
        "time an offset, or none (then they are read as UTC)")
    assert raised.value.field == "event_timestamp"


def test_zone_aware_parquet_times_are_stored_in_utc(tmp_path: Path, contract: DataContract) -> None:
    berlin = pd.Series(pd.date_range("2026-01-01 10:00", periods=2, freq="h", tz="Europe/Berlin"))
    source = tmp_path / "tx.parquet"
    frame = pd.read_csv(_csv(tmp_path, ["2026-01-01 10:00:00"] * 2))
    frame.assign(event_timestamp=berlin).to_parquet(source, index=False)
    stored = _stored(source, tmp_path, contract)
    assert str(stored["event_timestamp"].dt.tz) == "UTC"
    assert stored["event_timestamp"].tolist() == [pd.Timestamp("2026-01-01 09:00", tz="UTC"),
                                                  pd.Timestamp("2026-01-01 10:00", tz="UTC")]


def test_a_text_column_of_digits_stays_text(tmp_path: Path, contract: DataContract) -> None:
    # Only the label's 0/1 spellings become numbers; a merchant called "1" keeps its name.
    stored = _stored(_csv(tmp_path, ["2026-01-01 10:00:00"] * 3, ["1", "0", "M7"]), tmp_path, contract)
    assert stored["merchant_id"].tolist() == ["1", "0", "M7"]


def test_the_last_header_column_counts_when_the_delimiter_is_sniffed(tmp_path: Path, contract: DataContract) -> None:
    source = tmp_path / "tx.csv"
    # The header's last field ends the line (no delimiter after it); it still counts as a contract column.
    header = HEADER.replace(",", ";")
    source.write_text(f"{header}\nT1;C1;M1;2026-01-01 10:00:00;5.5;fuel;pos;US;0\n")
    stored = _stored(source, tmp_path, contract)
    assert stored["is_fraud"].tolist() == [0]
    assert list(stored.columns) == HEADER.split(",")


def test_the_snapshot_holds_the_source_columns_and_dated_metadata(tmp_path: Path, contract: DataContract) -> None:
    snapshot = ingest(str(_csv(tmp_path, ["2026-01-01 10:00:00"])), tmp_path / "snapshots", contract)
    assert pq.read_schema(snapshot.path).names == HEADER.split(",")  # no index column
    created = datetime.fromisoformat(json.loads(snapshot.meta_path.read_text())["created_at"])
    assert created.utcoffset() is not None


def test_an_unreadable_source_names_the_reason(tmp_path: Path, contract: DataContract) -> None:
    folder = tmp_path / "tx.csv"
    folder.mkdir()
    with pytest.raises(IngestError) as raised:
        ingest(str(folder), tmp_path / "snapshots", contract)
    assert raised.value.message.startswith(f"cannot read source {folder}: [Errno 21] Is a directory")
    assert raised.value.field == "source"
