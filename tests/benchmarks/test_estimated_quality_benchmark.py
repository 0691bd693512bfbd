"""benchmarks/estimated_quality_real.py keeps running end to end: given `--family mlp` and a homes folder
that already holds a copy of the run's shared demo home (tests/demo_home.py: 6,000 rows, the default
family), it reuses that home rather than training one, replays 20,000 rows of traffic after the demo's
data (two windows) and prints, per family, the calibration its training chose and, for each of the three
readings, every metric's windows inside the interval and mean absolute error, all sane. Whether the
estimate holds is judged by the full run (docs/monitoring-estimated-quality.md), not on two windows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from demo_home import DemoRun, demo_copy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]  # the shared demo may be built first

ROOT = Path(__file__).resolve().parents[2]
READINGS = ["as served", "through the reference's score map", "through the map refitted on the labelled traffic so far"]
CELL = re.compile(r"(\d+) of (\d+) / (\d\.\d{3})")


def test_the_short_run_reuses_the_family_home_and_prints_its_rows_with_sane_figures(
        demo_run: DemoRun, tmp_path: Path) -> None:
    demo_copy(demo_run, tmp_path / "homes" / "mlp" / "home")
    # The home is named on the command line; settings from the test's environment must not reach it.
    env = {name: value for name, value in os.environ.items() if not name.startswith("MLOPS_")}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "estimated_quality_real.py"), "--family", "mlp",
                             "--homes", str(tmp_path / "homes"), "--rows", "20000"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
                            env={**env, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(result.stdout)  # the figures, for a run with -s
    assert f"mlp: reusing {tmp_path / 'homes' / 'mlp' / 'home'}" in result.stdout
    assert re.search(r": mlp, calibration (platt|isotonic|none), version 1, threshold 0\.\d{3}; 2 windows of 10,000 "
                     r"rows after the demo's 6,000 rows", result.stdout), result.stdout
    table = result.stdout.split("\n## every home: realized inside the 95 % interval / mean absolute error\n")[1]
    header, _, *lines = [line for line in table.splitlines() if line.startswith("|")]
    assert header == "| family | calibration | probabilities read | precision | recall | f1 | pr_auc |"
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert [row[2] for row in rows] == READINGS
    for family, calibration, _, *cells in rows:
        assert family == "mlp"
        assert calibration in {"platt", "isotonic", "none"}
        for cell in cells:
            match = CELL.fullmatch(cell)
            assert match, cell
            inside, windows, error = int(match[1]), int(match[2]), float(match[3])
            assert windows == 2, cell
            assert 0 <= inside <= windows, cell
            assert 0 <= error < 0.5, cell
