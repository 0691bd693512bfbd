"""The gates that delegate to commands (lint, tests, the image build) and the gates' command line.

lint and tests run real `make`, ruff and pytest on a small project in a temporary folder; the image
gate meets no Docker engine here, so a fake `docker` on PATH stands in for the engine's answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci_gates.__main__ import REPO_ROOT, main
from ci_gates.image import image_gate
from ci_gates.make_targets import make_gate

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def small_project(root: Path, code: str, test: str) -> Path:
    root.mkdir()
    (root / "code.py").write_text(code)
    (root / "test_code.py").write_text(test)
    pytest = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {sys.executable} -m pytest -q -p no:cacheprovider"
    (root / "Makefile").write_text(f"lint:\n\t{BIN}/ruff check --isolated --select F code.py\n"
                                   f"test:\n\t{pytest} test_code.py\n")
    return root


def test_lint_gate_fails_with_ruffs_count_and_passes_clean_code(tmp_path: Path) -> None:
    dirty = small_project(tmp_path / "dirty", "import os\n", "def test_ok() -> None:\n    pass\n")
    outcome = make_gate("lint", "lint", dirty, tmp_path / "logs")
    assert outcome.status == "FAIL"
    assert "make lint: exit 2" in outcome.checked
    assert "'Found 1 error.'" in outcome.checked
    assert outcome.log is not None
    assert "F401" in outcome.log.read_text()
    clean = small_project(tmp_path / "clean", "VALUE = 1\n", "def test_ok() -> None:\n    pass\n")
    assert make_gate("lint", "lint", clean, tmp_path / "logs").status == "PASS"


def test_tests_gate_fails_with_pytests_summary_and_passes_green_tests(tmp_path: Path) -> None:
    red = small_project(tmp_path / "red", "VALUE = 1\n",
                        "def test_ok() -> None:\n    pass\n\n\ndef test_wrong() -> None:\n    assert 1 == 2\n")
    outcome = make_gate("tests", "test", red, tmp_path / "logs")
    assert outcome.status == "FAIL"
    assert "1 failed, 1 passed in" in outcome.checked
    green = small_project(tmp_path / "green", "VALUE = 1\n", "def test_ok() -> None:\n    pass\n")
    passed = make_gate("tests", "test", green, tmp_path / "logs")
    assert passed.status == "PASS"
    assert "1 passed in" in passed.checked


def fake_docker(folder: Path, *, engine_answers: bool) -> Path:
    """A `docker` that answers `version` (or not) and whose `build` fails the way BuildKit reports it."""
    folder.mkdir()
    version = "echo 27.3.1; exit 0" if engine_answers else \
        "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2; exit 1"
    script = folder / "docker"
    script.write_text(f"#!/bin/sh\ncase \"$1\" in\n  version) {version} ;;\n"
                      "  build) echo 'ERROR: failed to solve: process \"/bin/sh -c uv pip install\" did not complete "
                      "successfully: exit code: 1' >&2; exit 1 ;;\nesac\nexit 1\n")
    script.chmod(0o755)
    return folder


def test_image_gate_without_docker_fails_or_skips_as_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    outcome = image_gate(REPO_ROOT, tmp_path / "logs")
    assert outcome.status == "FAIL"
    assert "not built: no docker executable on PATH" in outcome.reason
    skipped = image_gate(REPO_ROOT, tmp_path / "logs", without_docker="skip")
    assert skipped.status == "SKIP"
    assert "no docker executable on PATH" in skipped.reason


def test_image_gate_names_an_engine_that_does_not_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(fake_docker(tmp_path / "bin", engine_answers=False)))
    outcome = image_gate(REPO_ROOT, tmp_path / "logs")
    assert outcome.status == "FAIL"
    assert "the Docker engine does not answer (Cannot connect to the Docker daemon" in outcome.reason


def test_image_gate_reports_a_failed_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{fake_docker(tmp_path / 'bin', engine_answers=True)}{os.pathsep}/usr/bin:/bin")
    outcome = image_gate(REPO_ROOT, tmp_path / "logs")
    assert outcome.status == "FAIL"
    assert "docker build -f serving/Dockerfile -t mlops-serving:gate . on engine 27.3.1: exit 1" in outcome.checked
    assert outcome.reason.startswith("the build failed: ERROR: failed to solve:")


def test_command_line_prints_one_line_per_gate_and_exits_by_the_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLOPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["image", "--without-docker", "skip"]) == 0
    missing = tmp_path / "no-baseline.json"
    assert main(["latency", "image", "--without-docker", "skip", "--baseline", str(missing)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("image        SKIP docker build")
    assert lines[1] == "gates: 0 passed, 0 failed, 1 skipped in 0 s"
    assert lines[2].startswith(f"latency      FAIL could not check: no latency baseline at {missing}")
    assert lines[3].startswith("image        SKIP")
    assert lines[4].startswith("gates: 0 passed, 1 failed, 1 skipped")


def test_unknown_gate_exits_2_with_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "ci_gates", "lint", "speed"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "error: unknown gate 'speed'; choose from lint, tests, data, repro, performance, latency, image")


def test_the_lint_summary_names_each_verdict_once_and_mkdocs_strict_failure() -> None:
    from ci_gates.make_targets import summary_line

    conftests = "Success: no issues found in 1 source file\n" * 6
    lint = ("All checks passed!\nContracts: 3 kept, 0 broken.\nSuccess: no issues found in 249 source files\n"
            + conftests)
    assert summary_line(lint) == ("All checks passed!; Contracts: 3 kept, 0 broken.; Success: no issues found in "
                                  "249 source files; Success: no issues found in 1 source file")
    failed = lint + "WARNING -  A reference to 'missing.md' is not found\n\nAborted with 1 warnings in strict mode!\n"
    assert summary_line(failed).endswith("; Aborted with 1 warnings in strict mode!")
