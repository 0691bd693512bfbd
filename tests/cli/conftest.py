"""Fixtures of the command line's tests: a home for CLI runs."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """MLOPS_HOME set to tmp_path/home, not created: a command creates only what it needs."""
    home = tmp_path / "home"
    monkeypatch.setenv("MLOPS_HOME", str(home))
    return home
