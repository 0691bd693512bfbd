"""The import contracts in pyproject.toml hold the layers: the tree as it is passes `lint-imports`,
and an import of pipelines planted in the core (in a copy of the tree) fails it, naming the
layers contract."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("platform", "pipelines", "serving", "monitoring", "feature_repo", "infra")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _python_only(folder: str, names: list[str]) -> set[str]:
    """copytree's ignore: everything but Python sources and the folders that hold them."""
    return {n for n in names if n == "__pycache__" or (not n.endswith(".py") and not Path(folder, n).is_dir())}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The Python packages and pyproject.toml, copied: what lint-imports reads."""
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=_python_only)
    shutil.copy2(REPO / "pyproject.toml", tmp_path)
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # The copy comes first on the path: the installed packages point at the repository.
    env = {**os.environ, "PYTHONPATH": f"{tree / 'platform'}{os.pathsep}{tree}"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_tree_keeps_every_import_contract(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def test_an_import_of_pipelines_in_the_core_breaks_the_layers_contract(tree: Path) -> None:
    planted = tree / "platform" / "mlops" / "errors.py"
    planted.write_text(planted.read_text() + "\nimport pipelines  # planted\n")

    result = _lint(tree)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "layers: the core at the bottom, the command line and the cluster tooling on top BROKEN" in result.stdout
    assert "mlops is not allowed to import pipelines:" in result.stdout
    assert "mlops.errors -> pipelines" in result.stdout
    assert "Contracts: 2 kept, 1 broken." in result.stdout
