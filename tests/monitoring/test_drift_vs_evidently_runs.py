"""benchmarks/drift_vs_evidently.py keeps running as the drift job gains tests of its own (a small window)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_the_evidently_comparison_runs_and_compares_equal_scores() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "drift_vs_evidently.py"), "--rows", "3000",
                             "--reference-rows", "3000"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    ours = next(line for line in result.stdout.splitlines() if line.startswith("| ours"))
    compared, difference = (cell.strip() for cell in ours.strip("|").split("|")[2:4])
    assert int(compared) > 20
    assert float(difference) < 1e-9
    assert "speed-up:" in result.stdout
