"""The one install script for the Debian packages the tests use (.ci/system-packages.sh), and the
tests that skip, with its reason, when a program is missing instead of failing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / ".ci" / "system-packages.sh"
TOOLS = ("bash", "cut", "tr", "sed", "paste", "id")  # what the script itself runs
PROGRAMS = ("prometheus", "promtool", "prometheus-pushgateway", "prometheus-node-exporter", "redis-server",
            "postgres", "java", "chromium")


def _bin_with(tmp_path: Path, programs: tuple[str, ...]) -> Path:
    """A PATH folder with the script's own tools and a stub for each named program."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (folder / tool).symlink_to(found)
    for program in programs:
        stub = folder / program
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    return folder


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(SCRIPT), *args], capture_output=True,
                          text=True, env={"PATH": str(folder)}, timeout=60, check=False)


def test_nothing_missing_prints_nothing(tmp_path: Path) -> None:
    result = _run(_bin_with(tmp_path, PROGRAMS))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_missing_programs_are_named_in_one_line_with_why_and_exit_0(tmp_path: Path) -> None:
    folder = _bin_with(tmp_path, tuple(p for p in PROGRAMS if p not in ("redis-server", "prometheus-pushgateway")))
    result = _run(folder, "--check")  # never install, even as root
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    assert "redis-server for the Redis replica test" in lines[0]
    assert "prometheus-pushgateway for the Pushgateway tests" in lines[0]
    assert lines[0].endswith("Install: sudo apt-get install -y prometheus-pushgateway redis-server")
    assert "prometheus for" not in lines[0]
    assert "java" not in lines[0]


def test_strict_fails_when_a_package_stays_missing(tmp_path: Path) -> None:
    folder = _bin_with(tmp_path, tuple(p for p in PROGRAMS if p != "java"))
    result = _run(folder, "--check", "--strict")
    assert result.returncode == 1
    assert "openjdk-17-jre-headless for the Spark backfill tests" in result.stdout


def test_ci_and_make_test_share_the_script() -> None:
    assert ".ci/system-packages.sh --strict" in (REPO_ROOT / ".ci" / "run").read_text()
    recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe is not None
    assert ".ci/system-packages.sh" in recipe[1]
    assert "apt-get" not in (REPO_ROOT / ".ci" / "run").read_text()


def test_the_redis_test_skips_with_the_reason_when_redis_server_is_missing(tmp_path: Path) -> None:
    """Not a FileNotFoundError at set-up: a skip that says what to install (before the platform is built)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0", "-rs", "-q",
         "tests/serving/test_replicas_and_outages.py::test_two_replicas_on_one_redis_keep_every_event"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PATH": str(_bin_with(tmp_path, ()))})
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 skipped" in result.stdout
    assert "needs redis-server from Debian: apt-get install -y redis-server" in result.stdout
