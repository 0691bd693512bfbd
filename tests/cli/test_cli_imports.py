"""The command line starts in a second: `mlops --help`, and the app every command hangs on, import no
training, validation, feature-store or drift library (each costs seconds per process; a command that
needs one imports it when it runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

HEAVY = ("torch", "great_expectations", "evidently", "feast")

PROBE = """
import json, sys
from mlops_cli.app import app
try:
    app(["--help"])
except SystemExit as stop:
    assert stop.code == 0, stop.code
print(json.dumps(sorted({name.split(".")[0] for name, module in sys.modules.items() if module is not None})))
"""


def _loaded_by_help(tmp_path: Path, blocked: tuple[str, ...] = ()) -> list[str]:
    # A blocked library raises ImportError when imported: a lazy import must stay lazy, not fail later.
    block = "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    env = {**os.environ, "MLOPS_HOME": str(tmp_path / "home")}
    result = subprocess.run([sys.executable, "-c", "import sys\n" + block + PROBE], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Usage" in result.stdout
    loaded: list[str] = json.loads(result.stdout.splitlines()[-1])
    return loaded


def test_help_imports_no_heavy_library(tmp_path: Path) -> None:
    loaded = _loaded_by_help(tmp_path)

    assert set(loaded) & set(HEAVY) == set()
    assert "mlops_cli" in loaded  # the probe did import the app


def test_help_answers_with_every_heavy_library_missing(tmp_path: Path) -> None:
    """As in a slim image: none of them importable, and the help still lists the commands."""
    assert set(_loaded_by_help(tmp_path, blocked=HEAVY)) & set(HEAVY) == set()
