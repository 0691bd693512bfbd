"""One pipeline run at a time per MLOPS_HOME: an advisory ``fcntl.flock`` on ``<home>/pipeline.lock``.

A scheduled run (cron, systemd timer) that starts while the previous one still trains exits at once
instead of racing it for the registry and the feature store. The kernel drops the lock when the
holder exits, however it exits, so a crashed run never leaves a stale lock behind; the file only
says which process held it last.
"""

from __future__ import annotations

import fcntl
import os
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
