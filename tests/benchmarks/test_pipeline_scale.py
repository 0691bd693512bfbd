"""benchmarks/pipeline_scale.py's measurement: the peak resident memory of a run counts every process
it starts (kfp.local runs each step in one of its own), per step as the runner's lines delimit them."""

from __future__ import annotations

import sys

import pytest

from benchmarks.pipeline_scale import run_measured

pytestmark = pytest.mark.unit

# A step whose memory lives in a child process, as a kfp.local step's does: 300 MB touched, held a moment.
_RUN = """
import subprocess, sys
print("23:05:21.118 - INFO - Executing task \\x1b[96m'train'\\x1b[0m", flush=True)  # as kfp.local prints it
subprocess.run([sys.executable, "-c", "import time; block = bytearray(300 << 20); time.sleep(0.6)"], check=True)
print("23:05:22.002 - INFO - Task \\x1b[96m'train'\\x1b[0m finished with status SUCCESS", flush=True)
"""


def test_a_steps_peak_counts_the_memory_of_the_processes_it_starts() -> None:
    _, steps, peak = run_measured([sys.executable, "-c", _RUN], {})
    assert list(steps) == ["train"]
    assert steps["train"][1] >= 300 << 10  # KB
    assert peak >= steps["train"][1]


def test_a_failed_run_stops_the_benchmark_with_its_command() -> None:
    with pytest.raises(SystemExit, match="exited 3"):
        run_measured([sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], {})
