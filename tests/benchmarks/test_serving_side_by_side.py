"""benchmarks/serving_side_by_side.py keeps running end to end: its short mode (1 s per row) on the
served platform's home prints every row with figures. No figure is judged: speed is the benchmark's
business on a quiet machine (docs/performance.md), this only keeps it from breaking silently."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from served_platform import ServedPlatform

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
LOAD_ROWS = ("(a) /predict with features", "(a) /predict at half peak rate", "(b) /v2/models/{name}/infer",
             "(b) gRPC ModelInfer", "(c) mlflow models serve", "(d) bare FastAPI JSON echo",
             "(e) ONNX Runtime in process")
START_ROWS = ("ready, registry reachable, s", "first start (compiles bytecode), s", "resident memory after load, MB",
              "ready, registry unreachable (cached model), s")


def _cells(output: str, row: str) -> list[float]:
    """The numbers of the table row named ``row`` (one row, exactly)."""
    [line] = [line for line in output.splitlines() if line.startswith(f"| {row} ")]
    return [float(cell) for cell in line.strip("|").split("|")[1:]]


def test_the_short_run_prints_every_row_with_figures(platform_home: ServedPlatform, tmp_path: Path) -> None:
    home = platform_home.settings.resolved_home
    # TMPDIR: the benchmark's working copy of the home goes with this test's temporary folder.
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serving_side_by_side.py"), "--home", str(home),
                             "--seconds", "1", "--connections", "4"], capture_output=True, text=True, timeout=800,
                            cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path)}, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(result.stdout)  # the figures, for a run with -s
    for row in LOAD_ROWS:
        rps, p50_ms, p99_ms, errors = _cells(result.stdout, row)
        assert rps > 0, row
        assert p99_ms >= p50_ms > 0, row
        assert errors == 0, row
    for row in START_ROWS:
        [value] = _cells(result.stdout, row)
        assert value > 0, row
    assert re.search(r"\(a\)/\(c\) = [\d.]+x", result.stdout), result.stdout[-3000:]
