"""The failure log: records appended by several writers read back by time window; a torn line skipped,
a file that cannot be read an error naming it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mlops.errors import UnreadableLogError
from mlops.failure_log import FailureLog, FailureRecord, describe, read_failures

pytestmark = pytest.mark.unit

START = datetime(2026, 3, 1, 23, 59, 58, tzinfo=UTC)


def _failure(seconds: int, role: str = "canary") -> FailureRecord:
    return FailureRecord(logged_at=START + timedelta(seconds=seconds), model_name="fraud-detector",
                         model_version="2", role=role, rows=seconds + 1, error=describe(RuntimeError("bad\ninput")))


def test_two_writers_read_back_oldest_first_by_window_and_day(tmp_path: Path) -> None:
    first, second = FailureLog(tmp_path), FailureLog(tmp_path)
    first.write([_failure(0), _failure(2)])
    second.write([_failure(1, role="champion"), _failure(3)])

    everything = read_failures(tmp_path)
    window = read_failures(tmp_path, start=START + timedelta(seconds=1), end=START + timedelta(seconds=3))

    assert [(f.rows, f.role) for f in everything] == [(1, "canary"), (2, "champion"), (3, "canary"), (4, "canary")]
    assert [f.rows for f in window] == [2, 3]
    assert everything[0].error == "RuntimeError: bad input"  # one line, whatever the message
    # Each writer owns a file per day: the records cross midnight (UTC).
    assert sorted(p.parent.name for p in tmp_path.glob("*/*.jsonl")) == ["2026-03-01"] * 2 + ["2026-03-02"] * 2


def test_a_line_torn_by_a_crash_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    log = FailureLog(tmp_path)
    log.write([_failure(0)])
    [path] = tmp_path.glob("*/*.jsonl")
    with path.open("a", encoding="utf-8") as torn:
        torn.write(_failure(1).model_dump_json()[:40])

    assert [f.rows for f in read_failures(tmp_path)] == [1]
    assert read_failures(tmp_path / "nothing-logged") == []


def test_a_last_line_torn_inside_a_character_is_skipped_too(tmp_path: Path) -> None:
    log = FailureLog(tmp_path)
    log.write([_failure(0)])
    [path] = tmp_path.glob("*/*.jsonl")
    whole = (_failure(1).model_copy(update={"error": "ValueError: coût"}).model_dump_json() + "\n").encode()
    with path.open("ab") as torn:
        torn.write(whole[:whole.index("û".encode()) + 1])  # the crash cut the two bytes of "û" apart

    assert [f.rows for f in read_failures(tmp_path)] == [1]


@pytest.mark.parametrize("breakage", ["a folder named *.jsonl", "a whole line not UTF-8"])
def test_a_file_that_cannot_be_read_is_an_error_naming_it(tmp_path: Path, breakage: str) -> None:
    FailureLog(tmp_path).write([_failure(0)])
    [day] = tmp_path.glob("*")
    broken = day / "other-writer.jsonl"
    if breakage == "a folder named *.jsonl":
        broken.mkdir()
    else:
        broken.write_bytes(_failure(1).model_dump_json().encode().replace(b"canary", b"can\xffary") + b"\n")

    with pytest.raises(UnreadableLogError, match="cannot read the failure log") as raised:
        read_failures(tmp_path)
    assert str(broken) in raised.value.message
    assert "\n" not in raised.value.message
