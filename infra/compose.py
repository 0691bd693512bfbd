"""Offline check of docker-compose.yml (no Docker engine here).

The file must validate against the Compose specification's JSON schema (../shared/schemas), and
what it names on this side must exist: every build context and Dockerfile, every bind-mounted host
path, the ``mlops`` command or ``python -m`` module a service runs (its compose ``command``, else
its Dockerfile's ``CMD``). Platform rules: pinned image tags, a health check on every long-running
service, ``depends_on`` only on health or on a one-shot's success, and no secret with a literal or
default value (every variable the file uses is listed in .env.example).

    python -m infra.compose [COMPOSE_FILE] [--schema FILE]   (exit 1 on any problem)
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from infra.manifests import REPO_ROOT
from mlops.errors import ManifestError

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DEFAULT_SCHEMA = REPO_ROOT.parent / "shared" / "schemas" / "compose-spec.json"
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}")
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|AUTH", re.IGNORECASE)
_DOCKERFILE_CMD = re.compile(r"^CMD\s+(\[.*\])\s*$", re.MULTILINE)

Service = dict[str, Any]


def load(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ManifestError(f"compose file {path} does not exist")
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict):
        raise ManifestError(f"{path} is not a YAML mapping")
    return document


def schema_errors(document: dict[str, Any], schema_path: Path) -> list[str]:
    if not schema_path.is_file():
        raise ManifestError(f"Compose schema {schema_path} does not exist (expected ../shared/schemas)")
    validator = jsonschema.Draft7Validator(json.loads(schema_path.read_text()))
    return [f"schema: {'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
            for error in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))]


def _bind_sources(service: Service) -> list[str]:
    """Host paths of the service's bind mounts (short syntax ``./a:/b[:ro]`` or long ``type: bind``)."""
    sources = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/", "~")):
                sources.append(source)
        elif isinstance(volume, dict) and volume.get("type") == "bind":
            sources.append(str(volume.get("source", "")))
    return sources


def _argv(value: Any) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    return [str(item) for item in value] if isinstance(value, list) else []


def _dockerfile(service: Service, base: Path) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    context = base / (build if isinstance(build, str) else build.get("context", "."))
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    return context / dockerfile


def command_problem(argv: list[str], base: Path) -> str | None:
    """What is missing for ``mlops SUB... [--OPTION]`` or ``python -m MODULE``; None when it exists (or is
    not ours). Also checks the systemd and cron lines of weekly retraining."""
    if argv[:1] == ["mlops"]:
        import typer

        from mlops_cli.app import app

        # typer vendors its own click: a group is whatever has subcommands.
        command: Any = typer.main.get_command(app)
        for word in argv[1:]:
            subcommands = getattr(command, "commands", None)
            if subcommands is None:
                break
            if word not in subcommands:
                return f"`{' '.join(argv)}`: the mlops CLI has no command {word!r}"
            command = subcommands[word]
        options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        unknown = [w.split("=")[0] for w in argv[1:] if w.startswith("--") and w.split("=")[0] not in options]
        return f"`{' '.join(argv)}`: mlops has no option {unknown[0]}" if unknown else None
    if len(argv) >= 3 and argv[0].startswith("python") and argv[1] == "-m":
        module = base.joinpath(*argv[2].split("."))
        if not (module.with_suffix(".py").is_file() or (module / "__main__.py").is_file()):
            return f"`{' '.join(argv)}`: no module {argv[2]} in the repository"
    return None


def service_problems(name: str, service: Service, base: Path) -> list[str]:
    """Missing build contexts, Dockerfiles, mounted paths and commands; unpinned images; no health check."""
    problems = []
    dockerfile = _dockerfile(service, base)
    if dockerfile is not None and not dockerfile.parent.is_dir():
        problems.append(f"{name}: build context {dockerfile.parent} does not exist")
    elif dockerfile is not None and not dockerfile.is_file():
        problems.append(f"{name}: Dockerfile {dockerfile} does not exist")
    for source in _bind_sources(service):
        if not (base / source).exists():
            problems.append(f"{name}: mounted host path {source} does not exist")
    argv = _argv(service.get("command"))
    if not argv and dockerfile is not None and dockerfile.is_file():
        match = _DOCKERFILE_CMD.search(dockerfile.read_text())
        argv = json.loads(match.group(1)) if match else []
    problem = command_problem(argv, base) if argv else None
    if problem:
        problems.append(f"{name}: {problem}")
    image = str(service.get("image", ""))
    if image and ("@" not in image and (":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"))):
        problems.append(f"{name}: image {image} has no pinned tag")
    one_shot = service.get("restart") == "no"
    if not one_shot and "healthcheck" not in service:
        problems.append(f"{name}: a long-running service needs a healthcheck")
    return problems


def dependency_problems(services: dict[str, Service]) -> list[str]:
    problems = []
    for name, service in services.items():
        depends = service.get("depends_on", {})
        if isinstance(depends, list):
            problems.append(f"{name}: depends_on must name a condition (service_healthy) per service")
            continue
        for target, rule in depends.items():
            condition = rule.get("condition") if isinstance(rule, dict) else None
            if target not in services:
                problems.append(f"{name}: depends_on unknown service {target}")
            elif condition == "service_healthy" and "healthcheck" not in services[target]:
                problems.append(f"{name}: depends_on {target} being healthy, but {target} has no healthcheck")
            elif condition not in ("service_healthy", "service_completed_successfully"):
                problems.append(f"{name}: depends_on {target} with condition {condition}, not service_healthy")
    return problems


def secret_problems(text: str, document: dict[str, Any], env_example: Path) -> list[str]:
    """Secrets only as ${VAR} without a default, and every variable listed in .env.example."""
    problems = []
    for name, service in document.get("services", {}).items():
        environment = service.get("environment", {})
        items = (environment.items() if isinstance(environment, dict)
                 else ([*entry.split("=", 1), ""] for entry in environment))
        # A *_FILE variable may name one of the service's own compose secrets (/run/secrets/NAME).
        secret_files = {f"/run/secrets/{entry if isinstance(entry, str) else entry.get('source')}"
                        for entry in service.get("secrets", [])}
        for key, value, *_ in items:
            if str(key).endswith("_FILE") and str(value) in secret_files:
                continue
            if _SECRET_NAME.search(str(key)) and not re.fullmatch(r"\$\{[A-Za-z0-9_]+(:\?[^}]*)?\}", str(value)):
                problems.append(f"{name}: {key} must be a ${{VARIABLE}} from .env, not a literal value")
    for variable, modifier in _VARIABLE.findall(text):
        if modifier.startswith((":-", "-", ":+", "+")):
            problems.append(f"variable {variable} has a default ({modifier}); defaults live in .env.example")
    used = {variable for variable, _ in _VARIABLE.findall(text)}
    listed = set()
    if env_example.is_file():
        listed = {line.split("=", 1)[0].strip() for line in env_example.read_text().splitlines()
                  if "=" in line and not line.lstrip().startswith("#")}
    problems += [f"variable {variable} is not listed in {env_example.name}" for variable in sorted(used - listed)]
    return problems


def check(path: Path = COMPOSE_FILE, schema_path: Path = DEFAULT_SCHEMA) -> list[str]:
    """Every problem of the compose file at ``path``; empty when it is sound."""
    document = load(path)
    problems = schema_errors(document, schema_path)
    services = document.get("services", {})
    if not isinstance(services, dict):
        return problems
    for name, service in services.items():
        if isinstance(service, dict):
            problems += service_problems(name, service, path.parent)
    problems += dependency_problems({n: s for n, s in services.items() if isinstance(s, dict)})
    problems += secret_problems(path.read_text(), document, path.parent / ".env.example")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.compose", description=__doc__.splitlines()[0])
    parser.add_argument("compose_file", nargs="?", type=Path, default=COMPOSE_FILE)
    parser.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="Compose specification JSON schema")
    args = parser.parse_args(argv)
    try:
        problems = check(args.compose_file, args.schema)
    except ManifestError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    print(f"{'FAIL' if problems else 'ok  '} {args.compose_file}" + "".join(f"\n  {p}" for p in problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
