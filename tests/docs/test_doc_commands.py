"""Every `mlops ...` command the README and docs/ show exists in the CLI, with the options they show;
and no page names a tracker's issue number."""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import typer

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`([^`]+)`")
_INDENTED = re.compile(r"^ {4,}\S.*$", re.MULTILINE)
# `mlops` as a program: at the start, after a space or after a path (.venv/bin/mlops), then a blank;
# not an option's value (`kubectl -n mlops`).
_PROGRAM = re.compile(r"(?:^|(?<=[\s/]))(?<!-n )(?<!--namespace )(?<!--namespace=)mlops(?=[ \t])")
# What ends a command on a shell line: a comment, a pipe, a list operator, a redirection.
_END = re.compile(r"\s(?:#|\|(?!\|)\s|&&|;|>>?|2>)")
_BRACKETS = re.compile(r"\[[^\]]*\]")  # [--since 1h | --start T]: a pipe between alternatives
_WORD = re.compile(r"[a-z][a-z0-9-]*")
_OPTION = re.compile(r"--?[A-Za-z][\w-]*")
_ISSUE = re.compile(r"\bissues?[\s_-]+#?\d+|(?<![\w&])#\d+\b", re.IGNORECASE)


def code_snippets(markdown: str) -> list[str]:
    """Fenced blocks, indented lines and inline code spans (which may wrap across lines)."""
    fenced = _FENCE.findall(markdown)
    prose = _FENCE.sub("", markdown)
    return [*fenced, *_INDENTED.findall(prose), *(" ".join(span.split()) for span in _INLINE.findall(prose))]


def shown_commands(snippet: str) -> list[list[str]]:
    """Each `mlops` command in a snippet as argv: the subcommand path, then every option shown
    (placeholders, values and brackets dropped; `--help` exists everywhere)."""
    commands = []
    snippet = snippet.replace("\\|", " ")
    for found in _PROGRAM.finditer(snippet):
        line = snippet[found.end():].split("\n", 1)[0]
        alternatives = _BRACKETS.sub(lambda options: options.group(0).replace("|", " "), line)
        rest = _END.split(alternatives, maxsplit=1)[0]
        words = rest.replace("[", " ").replace("]", " ").replace("|", " ").split()
        path: list[str] = []
        for word in words:
            if not _WORD.fullmatch(word):
                break
            path.append(word)
        options = [w.split("=")[0] for w in words if _OPTION.fullmatch(w.split("=")[0]) and w != "--help"]
        commands.append(["mlops", *path, *options])
    return commands


def cli() -> Any:
    """The click command behind the `mlops` console script (typer vendors its own click)."""
    (script,) = entry_points(group="console_scripts", name="mlops")
    return typer.main.get_command(script.load())


def command_problem(argv: list[str], root: Any) -> str | None:
    """What the CLI lacks of ``mlops SUB... --OPTION...``: a subcommand, or an option of the command the
    path leads to; None when all of it exists."""
    command = root
    for word in argv[1:]:
        options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        subcommands = getattr(command, "commands", None)
        if word.startswith("-"):
            if word not in options:
                return f"`{' '.join(argv)}`: {' '.join(argv[:2])}... has no option {word}"
        elif subcommands is None or word not in subcommands:
            return f"`{' '.join(argv)}`: the mlops CLI has no command {word!r}"
        else:
            command = subcommands[word]
    return None


def documented_commands() -> list[tuple[str, list[str]]]:
    return [(page.relative_to(ROOT).as_posix(), argv) for page in PAGES
            for snippet in code_snippets(page.read_text()) for argv in shown_commands(snippet)]


def test_the_extractor_reads_blocks_inline_spans_and_options() -> None:
    page = ("Run `mlops model promote VERSION [--alias A]`, or\n`mlops labels quality\n[--window 1h]`:\n\n"
            "```bash\n.venv/bin/mlops pipeline run data.csv --last-weeks 4 >> log 2>&1  # weekly\n```\n\n"
            "    cd /opt/mlops && mlops drift run [--since 1h | --start T] | tail; kubectl -n mlops get pods\n\n"
            "The core, importable as `mlops`, and `mlops.prediction_log.read_predictions(dir)`.\n")
    found = sorted(argv for snippet in code_snippets(page) for argv in shown_commands(snippet))
    assert found == sorted([["mlops", "model", "promote", "--alias"], ["mlops", "labels", "quality", "--window"],
                            ["mlops", "pipeline", "run", "--last-weeks"], ["mlops"],
                            ["mlops", "drift", "run", "--since", "--start"]])


@pytest.mark.parametrize(("argv", "missing"), [
    (["mlops", "model", "promot"], "no command 'promot'"),
    (["mlops", "model", "promote", "--force"], "no option --force"),
    (["mlops", "--verbose"], "no option --verbose"),
    (["mlops", "model", "list", "--version"], "no option --version"),
])
def test_a_command_or_option_the_cli_lacks_is_named(argv: list[str], missing: str) -> None:
    problem = command_problem(argv, cli())
    assert problem is not None
    assert missing in problem


def test_every_mlops_command_the_docs_show_exists() -> None:
    commands, root = documented_commands(), cli()
    assert len({tuple(argv[:3]) for _, argv in commands}) >= 25, "the extractor found too few commands"
    problems = sorted({f"{page}: {problem}" for page, argv in commands
                       if (problem := command_problem(argv, root)) is not None})
    assert problems == []


def test_no_page_names_an_issue_number() -> None:
    named = [f"{page.relative_to(ROOT)}: {found.group(0)!r}" for page in PAGES
             for found in _ISSUE.finditer(page.read_text())]
    assert named == []
