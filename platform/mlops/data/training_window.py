"""The time window a pipeline run trains on: ``[since, until)`` of the contract's event time.

A scheduled run trains on the freshest weeks (``--last-weeks N``, resolved when ingest runs, so a
recurring run moves with the calendar); a one-off run may name ``--since``/``--until``; no window
means all the data. Rows outside the window are dropped at ingest and counted. Rows without a time
are kept: they are not provably outside, and validation refuses them by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from mlops.errors import IngestError, InputError

if TYPE_CHECKING:  # the CLI checks a window before pandas is imported
    import pandas as pd


@dataclass(frozen=True)
class TrainingWindow:
    since: datetime | None = None
    until: datetime | None = None

    @property
    def is_open(self) -> bool:
        """No bound at all: every row is in."""
        return self.since is None and self.until is None

    def describe(self) -> str:
        start = self.since.isoformat() if self.since else "the first row"
        end = self.until.isoformat() if self.until else "the last row"
        return f"[{start}, {end})"


def parse_time(value: str, option: str) -> datetime:
    """An ISO 8601 time (naive = UTC); a bad one is an InputError naming the option."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InputError(f"{option} must be an ISO 8601 time such as 2026-03-01T00:00:00Z, got {value!r}",
                         field=option) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def resolve_window(since: str = "", until: str = "", last_weeks: int = 0, *,
                   now: datetime | None = None) -> TrainingWindow:
    """The window from the run's arguments ("" and 0 = not given); ``last_weeks`` counts back from
    ``until`` (default: now). Contradictory or malformed arguments are an InputError."""
    if last_weeks < 0:
        raise InputError(f"--last-weeks must be 1 or more, got {last_weeks}", field="last_weeks")
    if last_weeks and since:
        raise InputError("give --since or --last-weeks, not both", field="since")
    end = parse_time(until, "--until") if until else None
    if last_weeks:
        start: datetime | None = (end or now or datetime.now(UTC)) - timedelta(weeks=last_weeks)
    else:
        start = parse_time(since, "--since") if since else None
    if start is not None and end is not None and start >= end:
        raise InputError(f"the window is empty: --since {start.isoformat()} is not before --until {end.isoformat()}",
                         field="since")
    return TrainingWindow(since=start, until=end)


def apply_window(frame: pd.DataFrame, time_column: str, window: TrainingWindow) -> tuple[pd.DataFrame, int]:
    """The rows inside ``window`` and how many fell outside; no timed row inside is an IngestError."""
    import pandas as pd

    if window.is_open or frame.empty:
        return frame, 0
    times = frame[time_column]
    outside = pd.Series(False, index=frame.index)
    if window.since is not None:
        outside |= times < pd.Timestamp(window.since)
    if window.until is not None:
        outside |= times >= pd.Timestamp(window.until)
    kept = frame.loc[~outside].reset_index(drop=True)
    if kept[time_column].isna().all():  # rows without a time alone are no training data
        raise IngestError(f"no rows in the training window {window.describe()}: the data's {time_column} spans "
                          f"{times.min().isoformat()} to {times.max().isoformat()}", field=time_column)
    return kept, int(outside.sum())
