"""The GitHub workflow of the CI/CD gates, checked offline: it validates against the GitHub workflow
JSON schema (SchemaStore's, vendored by check-jsonschema), runs on push and pull requests, pins
every action to a commit, and calls only make targets, modules and gates that exist here."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from ci_gates.__main__ import GATES, REPO_ROOT

pytestmark = pytest.mark.unit

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "gates.yml"
MAKE_TARGET = re.compile(r"^([A-Za-z][\w-]*):", re.MULTILINE)
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")  # owner/action@<full commit SHA>


def github_workflow_schema() -> dict[str, Any]:
    import check_jsonschema

    vendored = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "github-workflows.json"
    schema: dict[str, Any] = json.loads(vendored.read_text())
    return schema


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    loaded["on"] = loaded.pop(True)  # PyYAML reads YAML 1.1, where a bare `on` is true; GitHub reads the key "on"
    return loaded


def run_lines(workflow: dict[Any, Any]) -> list[list[str]]:
    """Every command line of every `run:` step, split like a shell would (continuations are not used)."""
    lines = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            for line in step.get("run", "").splitlines():
                words = shlex.split(line)
                while words and re.match(r"^[A-Z_]+=", words[0]):  # leading environment assignments
                    words.pop(0)
                if words:
                    lines.append(words)
    return lines


def test_workflow_validates_against_the_github_workflow_schema(workflow: dict[Any, Any]) -> None:
    schema = github_workflow_schema()
    jsonschema.validators.validator_for(schema)(schema).validate(workflow)


def test_the_schema_catches_a_broken_workflow(workflow: dict[Any, Any]) -> None:
    broken = {**workflow, "jobs": {"lint-and-tests": {**workflow["jobs"]["lint-and-tests"], "runs_on": "x"}}}
    schema = github_workflow_schema()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validators.validator_for(schema)(schema).validate(broken)


def test_runs_on_push_and_pull_request_with_one_job_per_kind_of_gate(workflow: dict[Any, Any]) -> None:
    triggers = workflow["on"]
    assert {"push", "pull_request"} <= set(triggers)
    gates_run = set()
    for words in run_lines(workflow):
        if words[:2] == ["make", "gates"]:
            gates_run |= set(next(w for w in words if w.startswith("GATES=")).removeprefix("GATES=").split())
        if "ci_gates" in words and "--refresh-baseline" not in words:
            gates_run |= {w for w in words[words.index("ci_gates") + 1:] if not w.startswith("-")}
    assert gates_run == set(GATES)


def test_every_action_is_pinned_to_a_commit(workflow: dict[Any, Any]) -> None:
    uses = [step["uses"] for job in workflow["jobs"].values() for step in job["steps"] if "uses" in step]
    assert uses
    assert [u for u in uses if not PINNED.match(u)] == []


def test_commands_name_existing_make_targets_and_modules(workflow: dict[Any, Any]) -> None:
    targets = set(MAKE_TARGET.findall((REPO_ROOT / "Makefile").read_text()))
    for words in run_lines(workflow):
        if words[0] == "make":
            assert words[1] in targets, words
        if "-m" in words and words[0].endswith("python"):
            module = words[words.index("-m") + 1]
            assert module == "pip" or importlib.util.find_spec(module) is not None, words
        if words[0].startswith(".venv/bin/mlops"):
            from typer.main import get_command

            from mlops_cli.app import app

            group = get_command(app)
            assert words[1] in group.commands, words  # type: ignore[attr-defined]
