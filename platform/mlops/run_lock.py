"""Advisory ``fcntl.flock`` locks on files under MLOPS_HOME.

One pipeline run at a time per home (``<home>/pipeline.lock``): a scheduled run (cron, systemd timer)
that starts while the previous one still trains exits at once instead of racing it for the registry
and the feature store. Short read-merge-write updates of a shared file (the quality job's calibration
checks, which two CronJob pods or two shells may write at once) wait for each other instead
(:func:`waiting_lock`). The kernel drops a lock when the holder exits, however it exits, so a crashed
process never leaves a stale lock behind; the file only says which process held it last.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlops.errors import RunLockedError
from mlops.settings import Settings


def lock_path(settings: Settings) -> Path:
    return settings.resolved_home / "pipeline.lock"


@contextmanager
def exclusive_pipeline_run(settings: Settings) -> Iterator[Path]:
    """Hold the run lock for the block; RunLockedError at once when another process holds it."""
    path = lock_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunLockedError(f"another pipeline run (pid {holder}) is running on {settings.resolved_home}; "
                                 f"this one exits without doing anything (lock: {path})") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(descriptor)  # closing the last descriptor releases the lock


@contextmanager
def waiting_lock(path: Path, *, timeout_s: float = 60.0) -> Iterator[Path]:
    """Hold an exclusive lock on ``path`` for the block, waiting while another process holds it;
    RunLockedError naming the holder when it is still held after ``timeout_s``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
                    raise RunLockedError(f"{path} is still held by pid {holder} after {timeout_s:g} s") from None
                time.sleep(0.005)
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(descriptor)  # closing the last descriptor releases the lock
