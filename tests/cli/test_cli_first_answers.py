"""The CLI answers a mistake before it loads anything heavy, says what it is, and says what to do
when there is nothing to show."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlops_cli.app import app

runner = CliRunner()
HEAVY = ("pandas", "numpy", "mlflow", "kfp", "torch", "feast", "great_expectations", "evidently", "sklearn",
         "pydantic_settings", "pyarrow")
MISTAKES = {
    "train": "--data-dir is required",
    "train --data-dir /nonexistent/splits": "lacks split files: /nonexistent/splits/train.parquet",
    "model promote latest": "VERSION must be a version number, got 'latest'",
    "drift run --since yesterday": "--since must be a duration such as 30m, 6h or 7d, got 'yesterday'",
    "pipeline run data/tx.parquet --runner argo": "--runner must be one of kfp, inline, got 'argo'",
    "data generate --out tx.txt": "--out must end in .parquet or .csv, got 'tx.txt'",
    "predictions show --format xml": "--format must be one of table, csv, json, got 'xml'",
    "predictions show --version v2": "--version must be a version number, got 'v2'",
    "labels quality --since 1week": "--since must be a duration",
    "labels ingest /nonexistent/labels.csv": "label file not found: /nonexistent/labels.csv",
}
# Runs every mistake in one fresh interpreter, then lists the heavy modules that got imported.
_PROBE = """
import contextlib, io, json, sys
from mlops_cli.app import app
answers = {}
for line in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = app(line.split(), standalone_mode=False) or 0  # click returns an Exit's code
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:
            code = getattr(exc, "exit_code", repr(exc))
    answers[line] = code
heavy = sorted(name for name in json.loads(sys.argv[2]) if name in sys.modules)
print(json.dumps({"codes": answers, "heavy": heavy}))
"""


pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("cli_home")]


def test_mistakes_are_refused_before_settings_data_or_ml_libraries_load(tmp_path: Path) -> None:
    probe = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(list(MISTAKES)), json.dumps(HEAVY)],
                           capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path)
    answered = json.loads(probe.stdout.strip().splitlines()[-1])
    assert answered["codes"] == dict.fromkeys(MISTAKES, 2)
    assert answered["heavy"] == []
    assert not (tmp_path / "home").exists()  # nothing was created for a refused command


@pytest.mark.parametrize(("line", "message"), MISTAKES.items())
def test_each_mistake_is_one_line_naming_what_is_wrong(line: str, message: str) -> None:
    result = runner.invoke(app, line.split())
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert said.startswith("error: ")
    assert message in said
    assert "Traceback" not in result.output


def test_version_prints_the_installed_distribution() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"mlops {version('mlops-platform')}"


def test_runner_choices_are_listed_in_help() -> None:
    result = runner.invoke(app, ["pipeline", "run", "--help"])
    assert "[kfp|inline]" in result.output


@pytest.mark.parametrize(("line", "hint"), [
    ("drift history", "mlops drift run --since 1h"),
    ("labels quality", "mlops labels ingest FILE"),
    ("predictions show", "make demo"),
    ("drift run", "send some"),
])
def test_an_empty_state_says_what_to_do(line: str, hint: str) -> None:
    result = runner.invoke(app, line.split())
    assert hint in " ".join(result.output.split())
    assert "Traceback" not in result.output
