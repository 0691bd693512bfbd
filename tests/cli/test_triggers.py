"""The core's declared triggers are real `mlops` commands: each parses with the command line's own
parser into the command and values it names, the script it runs is the console script pyproject.toml
declares, and no package below the command line starts it by module name."""

from __future__ import annotations

import ast
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.core import TyperGroup

from mlops import triggers
from mlops.errors import ConfigError
from mlops.triggers import PipelineTrigger, ServeTrigger, Trigger
from mlops_cli.app import app

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
# Everything the command line sits on: none of it may reach up to it.
BELOW_THE_CLI = ("platform/mlops", "feature_repo", "pipelines", "serving", "monitoring")


def _parse(args: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The command path and parameter values click resolves ``args`` to, without running the command."""
    command = typer.main.get_command(app)
    path: list[str] = []
    while isinstance(command, TyperGroup):
        name, *args = args
        found = command.commands.get(name)
        assert found is not None, f"no command {name!r} under {[triggers.COMMAND, *path]}"
        path.append(name)
        command = found
    return path, dict(command.make_context(path[-1], list(args)).params)


@pytest.mark.parametrize(("trigger", "path", "values"), [
    (PipelineTrigger(data=Path("/data/window.parquet"), run_name="drift-retraining-1"), ["pipeline", "run"],
     {"source": "/data/window.parquet", "run_name": "drift-retraining-1", "runner": "kfp"}),
    (PipelineTrigger(data=Path("/data/window.parquet"), run_name="drift-retraining-3", runner="inline"),
     ["pipeline", "run"], {"source": "/data/window.parquet", "run_name": "drift-retraining-3", "runner": "inline"}),
    (PipelineTrigger(data=Path("/data/window.parquet"), run_name="drift-retraining-2", submit=True),
     ["pipeline", "submit"], {"source": "/data/window.parquet", "run_name": "drift-retraining-2"}),
    (ServeTrigger(), ["serve"], {"workers": 1}),
], ids=["pipeline-run", "pipeline-run-inline", "pipeline-submit", "serve"])
def test_each_trigger_is_a_command_of_the_cli(trigger: Trigger, path: list[str], values: dict[str, Any]) -> None:
    parsed_path, parsed = _parse(trigger.args())
    assert parsed_path == path
    assert {name: parsed[name] for name in values} == values


def test_the_trigger_runs_the_declared_console_script_of_this_environment() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[triggers.COMMAND] == "mlops_cli.app:app"
    assert triggers.command_path() == Path(sys.executable).with_name(triggers.COMMAND)


def test_without_the_script_the_trigger_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setattr(sysconfig, "get_path", lambda _: str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match=r"'mlops' command is not installed.*make setup"):
        triggers.command_path()
    on_path = tmp_path / "elsewhere"
    on_path.mkdir()
    (on_path / "mlops").write_text("#!/bin/sh\n")
    (on_path / "mlops").chmod(0o755)
    monkeypatch.setenv("PATH", str(on_path))
    assert triggers.command_path() == on_path / "mlops"


def test_nothing_below_the_cli_names_its_module() -> None:
    # `python -m mlops_cli` from a deployable is a call up the layers the import contracts cannot see:
    # the module's name as a string (an argument of a spawn), not prose that mentions it.
    named = [f"{path.relative_to(REPO)}:{node.lineno}"
             for folder in BELOW_THE_CLI for path in sorted((REPO / folder).rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and node.value.split(".")[0] == "mlops_cli"]
    assert named == []
