"""What a step's DVC stage depends on, derived from its code: the repository modules the step
function imports, transitively, and the settings they read that params.yaml holds.

Static (ast, nothing is imported): from the step function's module, its module-level imports and
those in the function's body; from every repository module reached, all its imports (a lazy import
inside a function runs when that function does), except those under ``if TYPE_CHECKING:``. A
package's ``__init__`` counts, since importing a submodule runs it. Third-party imports end the walk.

A setting is read where code takes ``<...>settings.<field>``, or where a parameter record (a class
with a ``from_settings`` constructor) declares the field.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import tomllib
from collections.abc import Iterator
from pathlib import Path

import yaml

from pipelines.settings import PipelineSettings

REPO = Path(__file__).resolve().parents[2]
PARAMS_FILE = REPO / "params.yaml"


@functools.cache
def _package_dirs() -> dict[str, Path]:
    """Top-level package -> its folder, as pyproject.toml maps them (mlops lives in platform/mlops)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    return {name: REPO / folder for name, folder in project["tool"]["setuptools"]["package-dir"].items()}


def module_file(name: str) -> Path | None:
    """The repository file of module ``name`` (a package's ``__init__.py``), or None outside the repository."""
    top, *rest = name.split(".")
    folder = _package_dirs().get(top)
    if folder is None:
        return None
    base = folder.joinpath(*rest)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _runs(nodes: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node under ``nodes`` except the bodies of ``if TYPE_CHECKING:`` (they never run)."""
    for node in nodes:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _runs(node.orelse)
            continue
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                yield from _runs([child])
            else:
                yield from ast.walk(child)


def _imports(nodes: list[ast.stmt]) -> set[str]:
    """The repository modules ``nodes`` import (``from a import b`` names a.b when b is a module)."""
    names: set[str] = set()
    for node in _runs(nodes):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {n for n in names if module_file(n) is not None}


def _body(path: Path) -> list[ast.stmt]:
    """The module's statements, parsed once per version of the file (dvc.yaml's stages share most modules)."""
    return _parsed(path, path.stat().st_mtime_ns)


@functools.cache
def _parsed(path: Path, mtime_ns: int) -> list[ast.stmt]:
    return ast.parse(path.read_text()).body


@functools.cache
def _file_imports(path: Path, mtime_ns: int) -> frozenset[str]:
    return frozenset(_imports(_parsed(path, mtime_ns)))


@functools.cache
def _file_settings_read(path: Path, mtime_ns: int) -> frozenset[str]:
    return frozenset(_settings_read(_parsed(path, mtime_ns)))


def _with_packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _step_code(function: str) -> tuple[Path, list[ast.stmt]]:
    """The step function's module file and what of it the step runs: module level and its own body."""
    module, name = function.split(":")
    spec = importlib.util.find_spec(module)  # also finds a step declared outside the packages (a test's)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module {module!r} for step function {function!r}")
    statements = _body(Path(spec.origin))
    top = [n for n in statements if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    body = [n for n in statements if isinstance(n, ast.FunctionDef) and n.name == name]
    if not body:
        raise AttributeError(f"module {module!r} defines no function {name!r}")
    return Path(spec.origin), [*top, *body]


def reached_modules(function: str) -> tuple[Path, dict[str, list[ast.stmt]]]:
    """The step's own file, and every repository module it reaches (name -> the statements that run)."""
    origin, code = _step_code(function)
    reached: dict[str, list[ast.stmt]] = {}
    pending = sorted(_imports(code))
    while pending:
        for name in _with_packages(pending.pop()):
            path = module_file(name)
            if name not in reached and path is not None:
                reached[name] = _body(path)
                pending.extend(_file_imports(path, path.stat().st_mtime_ns))
    reached.pop(_module_name(origin), None)  # the step's own module counts once, as origin
    return origin, reached


def _module_name(path: Path) -> str:
    for top, folder in _package_dirs().items():
        if path.is_relative_to(folder):
            parts = path.relative_to(folder).with_suffix("").parts
            return ".".join([top, *(p for p in parts if p != "__init__")])
    return ""


def code_deps(function: str) -> list[str]:
    """Repository paths of the step function's module and of every module it reaches, sorted."""
    origin, reached = reached_modules(function)
    paths = {origin, *(p for p in map(module_file, reached) if p is not None)}
    return sorted(str(p.relative_to(REPO)) for p in paths)


def _settings_read(nodes: list[ast.stmt]) -> set[str]:
    fields = set(PipelineSettings.model_fields)
    read: set[str] = set()
    for node in _runs(nodes):
        if isinstance(node, ast.Attribute) and node.attr in fields and ast.unparse(node.value).endswith("settings"):
            read.add(node.attr)
        elif isinstance(node, ast.ClassDef) and any(
                isinstance(f, ast.FunctionDef) and f.name == "from_settings" for f in node.body):
            read.update(a.target.id for a in node.body
                        if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and a.target.id in fields)
    return read


def params(function: str) -> list[str]:
    """The params.yaml keys (settings) the step's code reads, in params.yaml's order."""
    _, reached = reached_modules(function)
    _, code = _step_code(function)
    # Of the step's own module, only the function itself: the module's other functions are other steps.
    files = [path for path in map(module_file, reached) if path is not None]
    read = _settings_read(code[-1:]) | {f for path in files for f in _file_settings_read(path, path.stat().st_mtime_ns)}
    keys: dict[str, object] = yaml.safe_load(PARAMS_FILE.read_text())
    return [key for key in keys if key in read]
