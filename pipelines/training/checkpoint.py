"""Training checkpoints on a local path or any fsspec URL, and the SIGTERM that asks for one.

A node drain or a preemption sends SIGTERM and waits a grace period (30 s by default on Kubernetes)
before SIGKILL. The handler only sets a flag; the training loop checks it after every step, writes a
checkpoint and leaves with :data:`PREEMPTED_EXIT_CODE`. A restarted run loads the newest checkpoint.
"""

from __future__ import annotations

import io
import logging
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import fsspec
import torch

from mlops.errors import TrainingError

log = logging.getLogger(__name__)

PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM: what Kubernetes and torchrun expect from a terminated worker
_NAME = re.compile(r"^ckpt-(\d{10})\.pt$")
_KEEP = 2


class TrainingPreempted(TrainingError):  # noqa: N818  (a signal, not a failure of the code)
    """Training stopped on SIGTERM after writing a checkpoint; rerun to resume."""

    exit_code = PREEMPTED_EXIT_CODE


@dataclass
class PreemptionFlag:
    """Set by SIGTERM; read by the training loop between steps."""

    requested: bool = False
    signals: list[int] = field(default_factory=list)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.requested = True
        self.signals.append(signum)


@contextmanager
def sigterm_requests_checkpoint() -> Iterator[PreemptionFlag]:
    """Within the block SIGTERM sets the yielded flag instead of killing the process."""
    flag = PreemptionFlag()
    previous = signal.signal(signal.SIGTERM, flag._handle)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGTERM, previous)


class CheckpointStore:
    """Numbered checkpoints under one directory (``ckpt-<global step>.pt``); the newest wins."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)

    def _steps(self) -> list[int]:
        if not self.fs.exists(self.root):
            return []
        names = (str(p).rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False))
        return sorted(int(m.group(1)) for m in map(_NAME.match, names) if m)

    def _path(self, step: int) -> str:
        return f"{self.root}/ckpt-{step:010d}.pt"

    def save(self, step: int, payload: dict[str, Any]) -> str:
        """Write atomically (temporary name, then rename) and keep the newest two."""
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        self.fs.makedirs(self.root, exist_ok=True)
        path = self._path(step)
        partial = f"{path}.partial"
        with self.fs.open(partial, "wb") as out:
            out.write(buffer.getvalue())
        self.fs.mv(partial, path)
        for old in self._steps()[:-_KEEP]:
            self.fs.rm(self._path(old))
        log.info("checkpoint at step %d -> %s", step, path)
        return path

    def latest(self) -> dict[str, Any] | None:
        steps = self._steps()
        if not steps:
            return None
        path = self._path(steps[-1])
        with self.fs.open(path, "rb") as source:
            data = source.read()
        try:
            payload: dict[str, Any] = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:
            raise TrainingError(f"checkpoint {path} cannot be read: {exc}") from exc
        log.info("resuming from %s", path)
        return payload
