"""The training window a run trains on, and the lock that keeps runs one at a time."""

from __future__ import annotations

import fcntl
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from mlops.data.training_window import TrainingWindow, apply_window, resolve_window
from mlops.errors import IngestError, InputError, RunLockedError
from mlops.run_lock import exclusive_pipeline_run, lock_path
from mlops.settings import Settings

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 30, 3, 0, tzinfo=UTC)


def test_last_weeks_counts_back_from_until_or_now() -> None:
    assert resolve_window(last_weeks=4, now=NOW) == TrainingWindow(since=NOW - timedelta(weeks=4))
    until = datetime(2026, 3, 1, tzinfo=UTC)
    assert resolve_window(until="2026-03-01", last_weeks=1, now=NOW) == TrainingWindow(
        since=until - timedelta(weeks=1), until=until)
    assert resolve_window() == TrainingWindow()
    assert resolve_window().is_open


def test_times_without_an_offset_are_utc_and_offsets_are_kept() -> None:
    window = resolve_window(since="2026-03-01T00:00:00", until="2026-03-02T00:00:00+02:00")
    assert window.since == datetime(2026, 3, 1, tzinfo=UTC)
    assert window.until == datetime(2026, 3, 1, 22, tzinfo=UTC)


def test_last_weeks_without_until_or_now_counts_back_from_the_clock() -> None:
    before = datetime.now(UTC)
    since = resolve_window(last_weeks=1).since
    assert since is not None
    assert before - timedelta(weeks=1) <= since <= datetime.now(UTC) - timedelta(weeks=1)


@pytest.mark.parametrize(("kwargs", "message", "field"), [
    ({"since": "2026-03-01", "last_weeks": 2}, "^give --since or --last-weeks, not both$", "since"),
    ({"since": "2026-03-08", "until": "2026-03-01"}, "the window is empty: --since 2026-03-08", "since"),
    ({"since": "2026-03-01", "until": "2026-03-01"}, "the window is empty: --since 2026-03-01", "since"),
    ({"since": "last tuesday"}, "--since must be an ISO 8601 time", "--since"),
    ({"until": "2026-13-01"}, "--until must be an ISO 8601 time", "--until"),
    ({"last_weeks": -1}, "--last-weeks must be 1 or more", "last_weeks"),
])
def test_contradictory_or_malformed_windows_are_input_errors(kwargs: dict[str, object], message: str,
                                                             field: str) -> None:
    with pytest.raises(InputError, match=message) as raised:
        resolve_window(**kwargs)  # type: ignore[arg-type]
    assert raised.value.exit_code == 2
    assert raised.value.field == field


def _frame() -> pd.DataFrame:
    times = pd.to_datetime(pd.Series(["2026-02-01", "2026-02-20", "2026-03-05", None, "2026-03-29"]), utc=True)
    return pd.DataFrame({"event_timestamp": times, "amount": [1.0, 2.0, 3.0, 4.0, 5.0]})


def test_rows_outside_the_window_are_dropped_and_counted() -> None:
    window = resolve_window(since="2026-02-20", until="2026-03-29")
    kept, outside = apply_window(_frame(), "event_timestamp", window)
    # since is inclusive, until exclusive; a row without a time stays for validation to refuse.
    assert kept["amount"].tolist() == [2.0, 3.0, 4.0]
    assert (list(kept.columns), list(kept.index)) == (["event_timestamp", "amount"], [0, 1, 2])
    assert outside == 2


def test_an_open_window_keeps_every_row() -> None:
    frame = _frame()
    kept, outside = apply_window(frame, "event_timestamp", TrainingWindow())
    assert kept is frame
    assert outside == 0


def test_an_empty_window_names_the_span_of_the_data() -> None:
    with pytest.raises(IngestError, match=r"no rows in the training window \[2027-01-01T00:00:00\+00:00, the last "
                                          r"row\): the data's event_timestamp spans 2026-02-01T00:00:00\+00:00 to "
                                          r"2026-03-29T00:00:00\+00:00") as raised:
        apply_window(_frame(), "event_timestamp", resolve_window(since="2027-01-01"))
    assert raised.value.exit_code == 2
    assert raised.value.field == "event_timestamp"
    with pytest.raises(IngestError, match=r"no rows in the training window \[the first row, "
                                          r"2026-01-01T00:00:00\+00:00\): the data's"):
        apply_window(_frame(), "event_timestamp", resolve_window(until="2026-01-01"))


def test_the_run_lock_refuses_a_second_holder_and_is_released_after(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    with exclusive_pipeline_run(settings) as path:
        assert path == lock_path(settings)
        with pytest.raises(RunLockedError, match=rf"another pipeline run \(pid {os.getpid()}\) is running"), \
                exclusive_pipeline_run(settings):
            pass
    with exclusive_pipeline_run(settings):  # released: a later run gets it
        descriptor = os.open(lock_path(settings), os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(descriptor)
