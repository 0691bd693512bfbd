"""Ingestion: content-addressed, read-only snapshots from CSV/Parquet paths and fsspec URLs."""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import json
import logging
import shutil
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from mlops.contract import DataContract
from mlops.data.generator import generate_transactions
from mlops.data.ingest import Snapshot, ingest
from mlops.errors import IngestError, InputError

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    frame: pd.DataFrame = generate_transactions(300, seed=9)
    return frame


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_snapshot(snapshot: Snapshot, source: Path, snapshots: Path, rows: int) -> None:
    assert snapshot.sha256 == _sha(source)
    assert snapshot.path == snapshots / snapshot.sha256 / "data.parquet"
    assert snapshot.rows == rows
    assert len(pd.read_parquet(snapshot.path)) == rows  # the snapshot file holds every row
    meta = json.loads(snapshot.meta_path.read_text())
    assert meta["sha256"] == snapshot.sha256
    assert meta["rows"] == rows
    assert meta["path"] == str(snapshot.path)


def test_a_csv_source_becomes_a_parquet_snapshot_named_by_its_hash(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract
) -> None:
    source = tmp_path / "tx.csv"
    frame.to_csv(source, index=False)
    snapshots = tmp_path / "snapshots"
    snapshot = ingest(str(source), snapshots, contract)
    _assert_snapshot(snapshot, source, snapshots, len(frame))
    assert snapshot.source == str(source)
    stored = pd.read_parquet(snapshot.path)
    assert list(stored.columns) == list(frame.columns)
    pd.testing.assert_series_equal(stored["event_timestamp"], frame["event_timestamp"], check_dtype=False)
    pd.testing.assert_series_equal(stored["amount"], frame["amount"])
    pd.testing.assert_series_equal(stored["transaction_id"], frame["transaction_id"])


def test_a_parquet_source_is_snapshotted_unchanged(tmp_path: Path, frame: pd.DataFrame, contract: DataContract) -> None:
    source = tmp_path / "tx.parquet"
    frame.to_parquet(source, index=False)
    snapshots = tmp_path / "snapshots"
    snapshot = ingest(str(source), snapshots, contract)
    _assert_snapshot(snapshot, source, snapshots, len(frame))
    pd.testing.assert_frame_equal(pd.read_parquet(snapshot.path), frame, check_dtype=False)


def test_a_gzipped_csv_is_read_and_hashed_as_stored(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract
) -> None:
    source = tmp_path / "tx.csv.gz"
    source.write_bytes(gzip.compress(frame.to_csv(index=False).encode()))
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    assert snapshot.sha256 == _sha(source)
    assert snapshot.rows == len(frame)


def test_snapshot_files_are_read_only(tmp_path: Path, frame: pd.DataFrame, contract: DataContract) -> None:
    source = tmp_path / "tx.parquet"
    frame.to_parquet(source, index=False)
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    for path in (snapshot.path, snapshot.meta_path):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) == 0, oct(mode)
    assert not list(snapshot.path.parent.glob("*.tmp"))


def test_same_bytes_twice_reuse_the_snapshot(tmp_path: Path, frame: pd.DataFrame,
                                             contract: DataContract) -> None:
    source = tmp_path / "tx.csv"
    frame.to_csv(source, index=False)
    snapshots = tmp_path / "snapshots"
    first = ingest(str(source), snapshots, contract)
    data_mtime = first.path.stat().st_mtime_ns
    meta_mtime = first.meta_path.stat().st_mtime_ns
    copy = tmp_path / "copy" / "again.csv"
    copy.parent.mkdir()
    shutil.copyfile(source, copy)
    second = ingest(str(copy), snapshots, contract)
    assert second.path == first.path
    assert second.sha256 == first.sha256
    assert second.rows == first.rows
    assert second.source == str(copy)  # the snapshot is shared; the answer names this run's source
    assert first.path.stat().st_mtime_ns == data_mtime
    assert first.meta_path.stat().st_mtime_ns == meta_mtime
    assert [p.name for p in snapshots.iterdir()] == [first.sha256]


def test_different_bytes_give_a_different_snapshot(tmp_path: Path, frame: pd.DataFrame,
                                                   contract: DataContract) -> None:
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    frame.to_csv(one, index=False)
    frame.iloc[:-1].to_csv(two, index=False)
    snapshots = tmp_path / "snapshots"
    first = ingest(str(one), snapshots, contract)
    second = ingest(str(two), snapshots, contract)
    assert first.sha256 != second.sha256
    assert second.rows == first.rows - 1


def test_a_file_url_is_read_like_a_path(tmp_path: Path, frame: pd.DataFrame, contract: DataContract) -> None:
    source = tmp_path / "tx.parquet"
    frame.to_parquet(source, index=False)
    snapshot = ingest(source.as_uri(), tmp_path / "snapshots", contract)
    assert source.as_uri().startswith("file://")
    assert snapshot.sha256 == _sha(source)
    assert snapshot.rows == len(frame)


def test_missing_path_raises_ingest_error(tmp_path: Path, contract: DataContract) -> None:
    missing = tmp_path / "nowhere.csv"
    with pytest.raises(IngestError, match="not found") as info:
        ingest(str(missing), tmp_path / "snapshots", contract)
    assert info.value.field == "source"
    assert isinstance(info.value, InputError)
    assert info.value.http_status == 422
    assert not (tmp_path / "snapshots").exists()


def test_unknown_extension_raises_ingest_error(tmp_path: Path, frame: pd.DataFrame,
                                               contract: DataContract) -> None:
    source = tmp_path / "tx.json"
    frame.to_json(source)
    with pytest.raises(IngestError, match="cannot tell the format") as info:
        ingest(str(source), tmp_path / "snapshots", contract)
    assert info.value.field == "source"
    assert not (tmp_path / "snapshots").exists()


def test_garbage_parquet_raises_ingest_error(tmp_path: Path, contract: DataContract) -> None:
    source = tmp_path / "tx.parquet"
    source.write_bytes(b"this is not a parquet file\n" * 10)
    with pytest.raises(IngestError, match="not readable parquet") as info:
        ingest(str(source), tmp_path / "snapshots", contract)
    assert info.value.field == "source"
    assert not (tmp_path / "snapshots").exists()


def test_empty_csv_gives_zero_row_snapshot(tmp_path: Path, contract: DataContract) -> None:
    source = tmp_path / "empty.csv"
    source.write_bytes(b"")
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    assert snapshot.rows == 0
    assert snapshot.sha256 == hashlib.sha256(b"").hexdigest()
    stored = pd.read_parquet(snapshot.path)
    assert len(stored) == 0
    assert list(stored.columns) == [c.name for c in contract.columns]
    assert pq.read_schema(snapshot.path).names == list(stored.columns)  # no index column for other readers


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_header_without_rows_gives_a_zero_row_snapshot_of_its_columns(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract, fmt: str
) -> None:
    source = tmp_path / f"header.{fmt}"
    if fmt == "csv":
        frame.head(0).to_csv(source, index=False)
    else:
        frame.head(0).to_parquet(source, index=False)
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    _assert_snapshot(snapshot, source, tmp_path / "snapshots", 0)
    assert pq.read_schema(snapshot.path).names == list(frame.columns)  # no index column for other readers


def test_a_malformed_row_after_the_header_is_an_ingest_error_naming_the_source(
    tmp_path: Path, frame: pd.DataFrame, contract: DataContract
) -> None:
    lines = frame.head(5).to_csv(index=False).splitlines()
    lines[3] += ",1,2,3"  # three fields more than the header
    source = tmp_path / "torn.csv"
    source.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError) as info:
        ingest(str(source), tmp_path / "snapshots", contract)
    assert info.value.field == "source"
    assert info.value.message.startswith(f"{source} is not readable csv: ")
    assert "Expected" in info.value.message  # pandas' own reason: the field counts
    assert not list((tmp_path / "snapshots").glob("*/meta.json"))


def test_timestamps_are_parsed_to_utc(tmp_path: Path, contract: DataContract) -> None:
    source = tmp_path / "tz.csv"
    source.write_text(
        "transaction_id,customer_id,merchant_id,event_timestamp,amount,merchant_category,channel,country,is_fraud\n"
        "T1,C1,M1,2026-01-01T12:00:00+02:00,10.5,grocery,pos,US,0\n"
        "T2,C1,M1,2026-01-01T23:30:00-05:00,20.0,fuel,online,US,1\n"
    )
    snapshot = ingest(str(source), tmp_path / "snapshots", contract)
    stored = pd.read_parquet(snapshot.path)
    assert str(stored["event_timestamp"].dt.tz) == "UTC"
    assert stored["event_timestamp"].tolist() == [
        pd.Timestamp("2026-01-01T10:00:00", tz="UTC"),
        pd.Timestamp("2026-01-02T04:30:00", tz="UTC"),
    ]


def test_interrupted_ingest_is_redone(tmp_path: Path, frame: pd.DataFrame, contract: DataContract) -> None:
    """A crash after data.parquet landed but before meta.json was written must not poison the hash."""
    source = tmp_path / "tx.parquet"
    frame.to_parquet(source, index=False)
    snapshots = tmp_path / "snapshots"
    leftover = snapshots / _sha(source) / "data.parquet"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half-written")
    leftover.chmod(0o444)
    snapshot = ingest(str(source), snapshots, contract)
    assert snapshot.rows == len(frame)
    assert json.loads(snapshot.meta_path.read_text())["rows"] == len(frame)
    pd.testing.assert_frame_equal(pd.read_parquet(snapshot.path), frame, check_dtype=False)


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real HTTP server on loopback serving files from a folder."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_source_is_fetched_and_a_missing_one_is_not_found(
    http_root: tuple[Path, str], tmp_path: Path, frame: pd.DataFrame, contract: DataContract
) -> None:
    root, base_url = http_root
    frame.to_parquet(root / "tx.parquet", index=False)
    snapshot = ingest(f"{base_url}/tx.parquet", tmp_path / "snapshots", contract)
    assert snapshot.sha256 == hashlib.sha256((root / "tx.parquet").read_bytes()).hexdigest()
    assert snapshot.rows == len(frame)
    with pytest.raises(IngestError, match="source not found"):
        ingest(f"{base_url}/missing.parquet", tmp_path / "snapshots", contract)


def _csv_text(frame: pd.DataFrame, sep: str = ",") -> str:
    return str(frame.to_csv(index=False, sep=sep))


@pytest.mark.parametrize("sep", [";", "\t", "|"])
def test_delimiter_is_sniffed_from_the_header(tmp_path: Path, frame: pd.DataFrame, contract: DataContract,
                                              sep: str, caplog: pytest.LogCaptureFixture) -> None:
    source = tmp_path / "tx.csv"
    source.write_text(_csv_text(frame, sep))
    with caplog.at_level(logging.INFO, logger="mlops.data.ingest"):
        stored = pd.read_parquet(ingest(str(source), tmp_path / "snapshots", contract).path)
    assert list(stored.columns) == list(frame.columns)
    pd.testing.assert_series_equal(stored["amount"], frame["amount"])
    assert stored["event_timestamp"].notna().all()
    # The user is told which delimiter was read, and why.
    assert caplog.messages == [
        f"{source} looks {sep!r}-delimited (its header splits into the contract's columns); read it so"]


def test_a_comma_file_reads_without_a_delimiter_note(tmp_path: Path, frame: pd.DataFrame, contract: DataContract,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    source = tmp_path / "tx.csv"
    source.write_text(_csv_text(frame))
    with caplog.at_level(logging.INFO, logger="mlops.data.ingest"):
        ingest(str(source), tmp_path / "snapshots", contract)
    assert "-delimited" not in caplog.text


def test_mixed_naive_and_offset_times_are_refused_by_name(tmp_path: Path, frame: pd.DataFrame,
                                                           contract: DataContract) -> None:
    text = _csv_text(frame.head(20))
    source = tmp_path / "mixed.csv"
    # Two rows lose their offset, as when two exports with different settings are concatenated.
    lines = text.splitlines()
    lines[3] = lines[3].replace("+00:00", "")
    lines[7] = lines[7].replace("+00:00", "")
    source.write_text("\n".join(lines) + "\n")
    with pytest.raises(IngestError) as info:
        ingest(str(source), tmp_path / "snapshots", contract)
    message = info.value.message
    assert "column event_timestamp mixes times with a UTC offset (18 rows" in message
    assert "and times without one (2 rows" in message
    assert info.value.field == "event_timestamp"


def test_iso_times_in_several_forms_all_parse(tmp_path: Path, contract: DataContract) -> None:
    source = tmp_path / "forms.csv"
    header = "transaction_id,customer_id,merchant_id,event_timestamp,amount,merchant_category,channel,country,is_fraud"
    times = ["2026-01-01T10:00:00Z", "2026-01-01 11:00:00.250+00:00", "2026-01-01T12:00:00+01:00"]
    source.write_text("\n".join([header, *(f"T{i},C1,M1,{t},1.0,fuel,pos,US,0" for i, t in enumerate(times))]))
    stored = pd.read_parquet(ingest(str(source), tmp_path / "snapshots", contract).path)
    assert stored["event_timestamp"].tolist() == [
        pd.Timestamp("2026-01-01T10:00:00", tz="UTC"),
        pd.Timestamp("2026-01-01T11:00:00.250", tz="UTC"),
        pd.Timestamp("2026-01-01T11:00:00", tz="UTC"),
    ]


def test_true_false_labels_follow_the_contract_spellings(tmp_path: Path, frame: pd.DataFrame,
                                                         contract: DataContract) -> None:
    spelled = frame.copy()
    spelled["is_fraud"] = spelled["is_fraud"].map({1: "TRUE", 0: "false"})
    source = tmp_path / "labels.csv"
    source.write_text(_csv_text(spelled))
    stored = pd.read_parquet(ingest(str(source), tmp_path / "snapshots", contract).path)
    assert stored["is_fraud"].dtype == "int64"
    pd.testing.assert_series_equal(stored["is_fraud"], frame["is_fraud"])


def test_digits_as_text_beside_the_contract_spellings_are_labels(tmp_path: Path, frame: pd.DataFrame,
                                                                  contract: DataContract) -> None:
    spelled = frame.head(4).copy()
    spelled["is_fraud"] = ["yes", "0", "1", "F"]
    source = tmp_path / "labels.csv"
    source.write_text(_csv_text(spelled))
    stored = pd.read_parquet(ingest(str(source), tmp_path / "snapshots", contract).path)
    assert stored["is_fraud"].dtype == "int64"
    assert stored["is_fraud"].tolist() == [1, 0, 1, 0]


def test_spellings_the_contract_does_not_list_stay_as_given(tmp_path: Path, frame: pd.DataFrame,
                                                            contract: DataContract) -> None:
    strict = contract.model_copy(update={"columns": tuple(
        c.model_copy(update={"true_values": ("yes",), "false_values": ("no",)}) if c.name == "is_fraud" else c
        for c in contract.columns)})
    booleans = frame.assign(is_fraud=frame["is_fraud"].astype(bool))
    source = tmp_path / "labels.parquet"
    booleans.to_parquet(source, index=False)
    stored = pd.read_parquet(ingest(str(source), tmp_path / "snapshots", strict).path)
    assert stored["is_fraud"].dtype == bool  # validation's int type check names it


def test_refused_connection_is_named_not_reported_as_missing(tmp_path: Path, contract: DataContract) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(IngestError) as info:
        ingest(f"http://127.0.0.1:{port}/tx.csv", tmp_path / "snapshots", contract)
    assert info.value.message == f"cannot read source http://127.0.0.1:{port}/tx.csv: connection refused"
    assert info.value.field == "source"


def test_files_over_a_mebibyte_differing_only_at_the_end_get_different_snapshots(
    tmp_path: Path, contract: DataContract
) -> None:
    big = generate_transactions(15_000, seed=4)
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    big.to_csv(one, index=False)
    last = big.index[-1]
    big.loc[last, "amount"] = big.loc[last, "amount"] + 1.0  # the last row's amount only
    big.to_csv(two, index=False)
    first_bytes, second_bytes = one.read_bytes(), two.read_bytes()
    shared = next(i for i, (a, b) in enumerate(zip(first_bytes, second_bytes, strict=False)) if a != b)
    assert shared > 1 << 20  # the first MiB (and more) is identical: a hash of a prefix would collide
    snapshots = tmp_path / "snapshots"
    first = ingest(str(one), snapshots, contract)
    second = ingest(str(two), snapshots, contract)
    assert first.sha256 == _sha(one)
    assert second.sha256 == _sha(two)
    assert first.sha256 != second.sha256
    assert sorted(p.name for p in snapshots.iterdir()) == sorted([first.sha256, second.sha256])
