"""The prediction log: durable group commit, time-window reads, the frame monitoring reads, torn tails."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from mlops.prediction_frame import read_prediction_frame
from mlops.prediction_log import (
    SEGMENT_SUFFIX,
    PredictionLog,
    PredictionRecord,
    read_predictions,
)

pytestmark = pytest.mark.unit

START = datetime(2026, 3, 1, 23, 59, 58, tzinfo=UTC)


def _record(n: int, *, role: str = "champion") -> PredictionRecord:
    at = START + timedelta(seconds=n)
    return PredictionRecord(
        event_id=f"T{n}", event_timestamp=at, logged_at=at, entities={"customer_id": f"C{n % 3}"},
        inputs={"amount": 10.0 + n, "country": "US"}, features={"customer_txn_count_1h": float(n)},
        unknown_entities=["customer"] if n == 0 else [], unknown_categories=[], probability=n / 10,
        decision="legit", model_name="fraud-detector", model_version="1", request_id=f"r{n}", latency_s=0.001,
        role=role,
    )


def test_one_write_of_many_records_reads_back_by_window_and_day(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path)
    log.write([_record(n) for n in range(6)])
    log.close()

    everything = read_predictions(tmp_path)
    window = read_predictions(tmp_path, start=START + timedelta(seconds=1), end=START + timedelta(seconds=4))

    assert [r.event_id for r in everything] == [f"T{n}" for n in range(6)]
    assert everything[0] == _record(0)
    assert [r.event_id for r in window] == ["T1", "T2", "T3"]
    # The records cross midnight (UTC): one folder per day, so a window reads only its days.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2026-03-01", "2026-03-02"]


def test_a_segment_of_an_answer_a_batch_reads_as_one_written_at_once(tmp_path: Path) -> None:
    # 600 one-row batches (as the service writes) cross the count from which a segment's chunks are combined.
    records = [_record(n) for n in range(600)]
    at_once, one_by_one = PredictionLog(tmp_path / "at-once"), PredictionLog(tmp_path / "one-by-one")
    at_once.write(records)
    for record in records:
        one_by_one.append(record)
    at_once.close()
    one_by_one.close()
    start, end = START + timedelta(seconds=7), START + timedelta(seconds=590)

    read = read_predictions(tmp_path / "one-by-one", start=start, end=end)
    assert read == read_predictions(tmp_path / "at-once", start=start, end=end) == records[7:590]
    assert read_prediction_frame(tmp_path / "one-by-one").equals(read_prediction_frame(tmp_path / "at-once"))


def test_a_segment_keeps_the_column_order_and_types_that_existing_logs_have(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path)
    log.write([_record(1)])
    log.close()
    [segment] = tmp_path.glob(f"*/*{SEGMENT_SUFFIX}")

    with pa.ipc.open_stream(pa.memory_map(str(segment))) as reader:
        schema = reader.schema

    strings, floats, times = pa.string(), pa.float64(), pa.timestamp("us", tz="UTC")
    assert [(f.name, f.type) for f in schema] == [
        ("event_id", strings), ("event_timestamp", times), ("logged_at", times),
        ("unknown_entities", pa.list_(strings)), ("unknown_categories", pa.list_(strings)),
        ("probability", floats), ("decision", strings), ("model_name", strings), ("model_version", strings),
        ("request_id", strings), ("latency_s", floats), ("role", strings), ("retry", pa.bool_()),
        ("features_exact", pa.bool_()), ("entity.customer_id", strings),
        ("input.amount", floats), ("input.country", strings), ("feature.customer_txn_count_1h", floats)]


def test_a_segment_written_before_retries_were_logged_reads_as_first_exact_answers(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path)
    log.write([_record(1), _record(1).model_copy(update={"event_id": "T2", "retry": True, "features_exact": False})])
    log.close()
    [segment] = tmp_path.glob(f"*/*{SEGMENT_SUFFIX}")
    with pa.ipc.open_stream(pa.memory_map(str(segment))) as reader:
        table = reader.read_all()
    older = segment.with_name(f"older{SEGMENT_SUFFIX}")
    with pa.ipc.new_stream(str(older), table.drop_columns(["retry", "features_exact"]).schema) as writer:
        writer.write_table(table.drop_columns(["retry", "features_exact"]))
    segment.unlink()
    log = PredictionLog(tmp_path)
    log.write([_record(1).model_copy(update={"event_id": "T3", "retry": True})])  # the new layout again
    log.close()

    flags = {r.event_id: (r.retry, r.features_exact) for r in read_predictions(tmp_path)}
    assert flags == {"T1": (False, True), "T2": (False, True), "T3": (True, True)}


def test_the_frame_has_one_column_per_input_feature_and_key(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path)
    log.append(_record(1))
    log.append(_record(2, role="challenger"))
    log.close()

    frame = read_prediction_frame(tmp_path)

    assert {"event_id", "logged_at", "model_version", "probability", "decision", "unknown_entities",
            "amount", "country", "customer_txn_count_1h", "customer_id", "role"} <= set(frame.columns)
    assert frame["role"].tolist() == ["champion", "challenger"]
    assert frame["amount"].tolist() == [11.0, 12.0]
    assert read_prediction_frame(tmp_path / "empty").empty


def test_a_torn_tail_loses_only_the_unacknowledged_batch(tmp_path: Path) -> None:
    log = PredictionLog(tmp_path)
    for n in range(5, 8):
        log.append(_record(n))
    [segment] = tmp_path.rglob(f"*{SEGMENT_SUFFIX}")
    acknowledged = segment.stat().st_size
    log.append(_record(8))
    written = segment.read_bytes()
    log.close()
    # SIGKILL halfway through writing the fourth batch: the stream ends in the middle of it.
    segment.write_bytes(written[: acknowledged + (len(written) - acknowledged) // 2])

    assert [r.event_id for r in read_predictions(tmp_path)] == ["T5", "T6", "T7"]


def test_a_failed_write_is_never_acknowledged(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the log folder should be")
    log = PredictionLog(blocked)

    with pytest.raises(NotADirectoryError):
        log.append(_record(1))
    log.close()


def test_records_of_other_layouts_in_one_write_keep_their_own_columns(tmp_path: Path) -> None:
    """/infer records have no entity keys and a challenger no latency; one write may mix them all."""
    log = PredictionLog(tmp_path)
    domain, challenger = _record(1), _record(2, role="challenger").model_copy(update={"latency_s": None})
    infer = _record(3).model_copy(update={"entities": {}, "inputs": {"amount": 13.0}})
    log.write([infer, domain, challenger])
    log.close()

    assert read_predictions(tmp_path) == [domain, challenger, infer]
    frame = read_prediction_frame(tmp_path)
    assert frame["event_id"].tolist() == ["T1", "T2", "T3"]
    assert frame["customer_id"].tolist()[:2] == ["C1", "C2"]
    assert frame["latency_s"].isna().tolist() == [False, True, False]
    assert frame["country"].tolist()[:2] == ["US", "US"]


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When each os.fsync of this test ran (the real fsync runs too)."""
    synced: list[float] = []
    real_fsync = os.fsync

    def recording_fsync(descriptor: int) -> None:
        real_fsync(descriptor)
        synced.append(time.monotonic())

    monkeypatch.setattr(os, "fsync", recording_fsync)
    return synced


def test_interval_zero_fsyncs_before_the_answer(tmp_path: Path, fsyncs: list[float]) -> None:
    log = PredictionLog(tmp_path, fsync_interval_s=0)
    log.append(_record(3))  # records of one day: one segment, whose creation fsyncs its folder too
    before = len(fsyncs)
    log.append(_record(4))
    assert len(fsyncs) == before + 1
    log.close()


def test_otherwise_the_answer_waits_for_no_fsync_and_one_follows_within_the_interval(
        tmp_path: Path, fsyncs: list[float]) -> None:
    slow = PredictionLog(tmp_path / "slow", fsync_interval_s=30)
    slow.append(_record(3))
    before = len(fsyncs)
    slow.append(_record(4))
    assert len(fsyncs) == before  # written (readable, survives SIGKILL), not yet fsynced
    assert [r.event_id for r in read_predictions(tmp_path / "slow")] == ["T3", "T4"]
    slow.close()
    assert len(fsyncs) > before  # closing syncs what is left

    quick = PredictionLog(tmp_path / "quick", fsync_interval_s=0.2)
    quick.append(_record(5))
    written, before = time.monotonic(), len(fsyncs)
    while len(fsyncs) == before and time.monotonic() < written + 10:
        time.sleep(0.05)
    quick.close()
    assert len(fsyncs) > before
    assert fsyncs[before] - written < 5


def test_every_plain_field_of_the_record_has_its_column_on_disk() -> None:
    from mlops.prediction_log import PLAIN_FIELDS, PredictionRecord

    nested = {"entities", "inputs", "features"}
    assert sorted(PLAIN_FIELDS) == sorted(set(PredictionRecord.model_fields) - nested)
