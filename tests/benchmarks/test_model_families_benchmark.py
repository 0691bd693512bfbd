"""benchmarks/model_families.py keeps running end to end: its short mode (few rows, rounds and epochs,
every family fitted in the benchmark's one process through the code a full run's family process runs)
prints, for both bundled examples, one table row per family with every column, and the figures are sane
(a fit took time, the process memory, the graph ranks better than chance, it has bytes and scores rows).
Speed is judged by the benchmark on a quiet machine (docs/own-model.md), not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("mlp", "xgboost", "sklearn HistGradientBoosting", "sklearn LogisticRegression pipeline",
            "torch user_nets:Wide")
COLUMNS = ["family", "train wall s", "peak RSS MB", "test PR-AUC", "test ROC AUC", "ONNX KB", "1-row calls/s"]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_the_short_run_prints_every_family_on_both_examples_with_sane_figures(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "model_families.py"), "--short"],
                            capture_output=True, text=True, timeout=850, cwd=ROOT, check=False,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(result.stdout)  # the figures, for a run with -s
    sections = result.stdout.split("\n### ")[1:]
    assert [s.splitlines()[0] for s in sections] == ["card-transactions", "terminal-payments"]
    for section in sections:
        lines = section.splitlines()
        [header] = [line for line in lines if line.startswith("| family |")]
        assert _cells(header) == COLUMNS
        rows = {cells[0]: dict(zip(COLUMNS[1:], map(lambda c: float(c.replace(",", "")), cells[1:]), strict=True))
                for cells in (_cells(line) for line in lines if line.startswith("| ") and line != header)
                if cells[0] in FAMILIES}
        assert list(rows) == list(FAMILIES), section
        for family, figures in rows.items():
            assert figures["train wall s"] > 0, family
            assert 100 < figures["peak RSS MB"] < 8_000, family  # short: the benchmark process's peak so far
            assert 0.5 < figures["test ROC AUC"] <= 1, family
            assert 0 < figures["test PR-AUC"] <= 1, family
            assert figures["ONNX KB"] > 0, family
            assert figures["1-row calls/s"] > 10, family
        assert "xgboost / mlp: train wall " in section
