"""The inline runner hands what a step freed back to the OS before the next step starts, so a run's
peak is its largest step, not the sum of its steps' leftovers (the ten-million-row run with xgboost).

The first step leaves the heap fragmented as pandas' strings or a library's buffers do: many small
blocks, one in fifty still held. glibc keeps the freed blocks between the held ones; the next step
must start without them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.orchestration.context import StepContext
from pipelines.orchestration.declaration import Step
from pipelines.orchestration.inline_runner import run_steps
from pipelines.settings import PipelineSettings

pytestmark = pytest.mark.unit

BLOCKS, BLOCK_FLOATS, KEEP_EVERY = 40_000, 1_000, 50  # 320 MB in 8 KB blocks, under glibc's mmap threshold
HELD: list[np.ndarray] = []
RESIDENT_MB: dict[str, int] = {}


def _resident_mb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) // 1024


def fragmenting_step(context: StepContext) -> None:
    blocks = [np.ones(BLOCK_FLOATS) for _ in range(BLOCKS)]
    HELD.extend(blocks[::KEEP_EVERY])
    RESIDENT_MB["at its peak"] = _resident_mb()


def next_step(context: StepContext) -> None:
    RESIDENT_MB["when the next step starts"] = _resident_mb()


STEPS = (Step("fragmenting", f"{__name__}:fragmenting_step", "Leaves the heap fragmented."),
         Step("next", f"{__name__}:next_step", "Reads the resident memory it starts with."))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads resident memory from /proc")
def test_the_next_step_starts_without_what_the_last_one_freed(settings: PipelineSettings, tmp_path: Path) -> None:
    HELD.clear()
    run_steps(StepContext.of(settings), {}, tmp_path, steps=STEPS)
    freed_mb = BLOCKS * BLOCK_FLOATS * 8 * (1 - 1 / KEEP_EVERY) / 2**20
    assert RESIDENT_MB["when the next step starts"] < RESIDENT_MB["at its peak"] - freed_mb / 2, RESIDENT_MB
    HELD.clear()
