"""Every image of ours that a manifest, docker-compose.yml, the compiled pipeline, the code or the
docs name is built by .github/workflows/images.yml from a Dockerfile and context that exist here
(every file it copies, every package folder the install needs), and pushed with the tag that names
it: the workflow's tag step runs here (bash) for a push to main, a release tag and a pull request.
Offline: YAML only, no Docker engine."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from infra.manifests import REPO_ROOT

pytestmark = pytest.mark.integration

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "images.yml"
REGISTRY = "ghcr.io/mlops-platform"
QUALIFIED = re.compile(rf"{re.escape(REGISTRY)}/([a-z0-9][a-z0-9.-]*):([\w.-]+)")
LOCAL = re.compile(r"^(mlops-[a-z0-9-]+):([\w.-]+)$")  # docker-compose's own images
PINNED = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}$")
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]

Objects = list[dict[str, Any]]
Reference = tuple[str, str, str]  # where, image name, tag


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [text for sub in value.values() for text in _strings(sub)]
    if isinstance(value, list):
        return [text for sub in value for text in _strings(sub)]
    return [value] if isinstance(value, str) else []


def _workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text())
    loaded["on"] = loaded.pop(True)  # YAML 1.1 reads a bare `on` as true; GitHub reads the key "on"
    return loaded


def _job() -> dict[str, Any]:
    job: dict[str, Any] = _workflow()["jobs"]["build-and-push"]
    return job


def builds() -> dict[str, dict[str, str]]:
    """The workflow's images by name: context, dockerfile, release tag."""
    return {entry["image"]: entry for entry in _job()["strategy"]["matrix"]["include"]}


def references(built: dict[str, Objects]) -> set[Reference]:
    """Every image of ours named in the built overlays (container images and any string: the Spark
    executors' image is an argument), docker-compose.yml, the compiled pipeline, infra/'s YAML, the
    docs and the code (the KFP components' base images)."""
    found: set[Reference] = set()
    for overlay, objects in built.items():
        for text in _strings(objects):
            found |= {(f"overlay {overlay}", name, tag) for name, tag in QUALIFIED.findall(text)}
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    for service, spec in compose["services"].items():
        match = LOCAL.match(spec.get("image", ""))
        if match:
            found.add((f"compose {service}", match[1], match[2]))
    named = [REPO_ROOT / "pipelines" / "training_pipeline.yaml", *sorted((REPO_ROOT / "infra").rglob("*.yaml")),
             *sorted((REPO_ROOT / "docs").rglob("*.md"))]
    named += [path for folder in ("pipelines", "monitoring", "serving", "platform")
              for path in sorted((REPO_ROOT / folder).rglob("*.py"))]  # PIPELINE_IMAGE, MONITORING_IMAGE
    for path in named:
        found |= {(str(path.relative_to(REPO_ROOT)), name, tag) for name, tag in QUALIFIED.findall(path.read_text())}
    return found


def pushed_tags(ref: str, ref_name: str) -> dict[str, list[str]]:
    """Run the workflow's tag step for each image as GitHub would on ``ref``: the tags it pushes
    (without the registry), or a failure as [``error: ...``]."""
    job = _job()
    script = next(step["run"] for step in job["steps"] if step.get("name") == "Tags of this event")
    found = {}
    for name, entry in builds().items():
        with tempfile.NamedTemporaryFile("w", suffix=".env", delete=False) as handle:
            env_file = Path(handle.name)
        env = {"PATH": os.environ["PATH"], "GITHUB_REF": ref, "GITHUB_REF_NAME": ref_name, "GITHUB_SHA": "f" * 40,
               "GITHUB_ENV": str(env_file), "REGISTRY": _workflow()["env"]["REGISTRY"], "IMAGE": entry["image"],
               "RELEASE": entry["release"]}
        result = subprocess.run(["bash", "-e", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                                check=False)
        tags = dict(line.split("=", 1) for line in env_file.read_text().splitlines()).get("TAGS", "").split()
        env_file.unlink()
        found[name] = tags if result.returncode == 0 else [f"error: {result.stdout.strip()}"]
    return found


def unbuilt(found: set[Reference], workflow_builds: dict[str, dict[str, str]], tags: list[dict[str, list[str]]],
            registry: str = REGISTRY) -> list[str]:
    """References that no build of the workflow pushes under that name and tag."""
    pushed = {tag.removeprefix(f"{registry}/") for event in tags for image in event.values() for tag in image}
    problems = []
    for where, name, tag in sorted(found):
        if name not in workflow_builds:
            problems.append(f"{where}: {name} is built by no job of {WORKFLOW.name}")
        elif f"{name}:{tag}" not in pushed:
            problems.append(f"{where}: {name}:{tag} is never pushed (pushed: {sorted(pushed)})")
    return problems


def _main_and_release() -> list[dict[str, list[str]]]:
    return [pushed_tags("refs/heads/main", "main"), pushed_tags(f"refs/tags/v{VERSION}", f"v{VERSION}")]


def _copied_sources(dockerfile: Path) -> list[str]:
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] in (["COPY"], ["ADD"]) and not any(word.startswith("--from=") for word in words):
            sources += [word for word in words[1:-1] if not word.startswith("--")]
    return sources


def test_every_image_of_ours_is_built_and_pushed_with_the_tag_that_names_it(built: dict[str, Objects]) -> None:
    found = references(built)
    assert {name for _where, name, _tag in found} >= {"mlops-python", "mlops-serving", "mlops-spark", "mlops-mlflow"}
    assert ("compose mlflow", "mlops-mlflow", "3.17.2") in found
    assert any(where == "overlay dev" and (name, tag) == ("mlops-serving", "dev") for where, name, tag in found)
    assert unbuilt(found, builds(), _main_and_release()) == []


def test_an_image_the_workflow_does_not_build_is_reported(built: dict[str, Objects]) -> None:
    without_spark = {name: entry for name, entry in builds().items() if name != "mlops-spark"}
    problems = unbuilt(references(built), without_spark, _main_and_release())
    assert problems
    assert all("mlops-spark is built by no job" in problem for problem in problems)
    only_main = unbuilt(references(built), builds(), _main_and_release()[:1])
    assert any("overlay prod: mlops-serving:0.1.0 is never pushed" in problem for problem in only_main)


def test_the_tags_follow_the_event() -> None:
    main, release = _main_and_release()
    assert main["mlops-serving"] == [f"{REGISTRY}/mlops-serving:dev", f"{REGISTRY}/mlops-serving:sha-{'f' * 40}"]
    assert release == {name: [f"{REGISTRY}/{name}:{entry['release']}"] for name, entry in builds().items()}
    assert pushed_tags("refs/pull/7/merge", "7/merge") == {name: [] for name in builds()}
    wrong = pushed_tags("refs/tags/v9.9.9", "v9.9.9")
    assert all(tags == [f"error: tag v9.9.9 is not v{VERSION} (pyproject.toml)"] for tags in wrong.values())


def test_each_build_has_its_dockerfile_its_context_and_the_release_it_is_named_by() -> None:
    setuptools_dirs = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for name, entry in builds().items():
        context, dockerfile = REPO_ROOT / entry["context"], REPO_ROOT / entry["dockerfile"]
        assert context.is_dir(), name
        assert dockerfile.is_file(), name
        sources = _copied_sources(dockerfile)
        assert sources, name
        assert [s for s in sources if not (context / s).exists()] == [], name
        if "pip install" in dockerfile.read_text() and "-e ." in dockerfile.read_text().replace('"', ""):
            # An install of the project needs every package folder setuptools lists copied in.
            copied = {Path(s).parts[0] for s in sources}
            assert {Path(d).parts[0] for d in setuptools_dirs.values()} <= copied, name
    mlflow_from = re.search(r"^FROM \S+:v?([\d.]+)$", (REPO_ROOT / builds()["mlops-mlflow"]["dockerfile"]).read_text(),
                            re.MULTILINE)
    assert mlflow_from is not None
    assert builds()["mlops-mlflow"]["release"] == mlflow_from[1]
    assert {entry["release"] for name, entry in builds().items() if name != "mlops-mlflow"} == {VERSION}


def test_compose_builds_its_images_from_the_workflows_dockerfiles() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    for service, spec in compose["services"].items():
        match = LOCAL.match(spec.get("image", ""))
        if match:
            entry = builds()[match[1]]
            build = spec["build"]
            assert Path(build["context"]) == Path(entry["context"]), service
            # Compose reads the dockerfile relative to the context.
            assert Path(build["context"]) / build.get("dockerfile", "Dockerfile") == Path(entry["dockerfile"]), service


def test_the_workflow_is_valid_runs_on_main_and_tags_and_pins_its_actions() -> None:
    import check_jsonschema

    schema_path = Path(check_jsonschema.__file__).parent / "builtin_schemas" / "vendor" / "github-workflows.json"
    schema = yaml.safe_load(schema_path.read_text())
    workflow = _workflow()
    jsonschema.validators.validator_for(schema)(schema).validate(workflow)
    assert workflow["on"]["push"] == {"branches": ["main"], "tags": ["v*"]}
    assert workflow["permissions"]["packages"] == "write"
    uses = [step["uses"] for step in _job()["steps"] if "uses" in step]
    assert uses
    assert all(PINNED.match(use) for use in uses)
