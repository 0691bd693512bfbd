"""Building the kustomize overlays in infra/ into plain objects (``kubectl kustomize``, offline)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from mlops.errors import ManifestError

INFRA_DIR = Path(__file__).resolve().parent
REPO_ROOT = INFRA_DIR.parent
OVERLAYS = ("dev", "prod", "volcano", "kserve")
DEFAULT_CRD_DIR = REPO_ROOT.parent / "shared" / "crds"
KUBECTL_MISSING = ("kubectl not found on PATH: it is a prerequisite for infra work "
                   "(kubectl >= 1.27 has kustomize built in; see infra/README.md)")


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        raise ManifestError(KUBECTL_MISSING)
    return path


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize DIRECTORY`` renders; a build error names the directory."""
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True,
                            check=False, timeout=120)
    if result.returncode != 0:
        raise ManifestError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def build_overlay(name: str) -> list[dict[str, Any]]:
    return build(INFRA_DIR / "overlays" / name)


def object_id(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata", {})
    namespace = metadata.get("namespace")
    name = metadata.get("name", "<no name>")
    return f"{obj.get('kind')}/{namespace}/{name}" if namespace else f"{obj.get('kind')}/{name}"


def find_object(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of that kind and name; a missing one is an error naming both."""
    for obj in objects:
        if obj.get("kind") == kind and obj.get("metadata", {}).get("name") == name:
            return obj
    raise ManifestError(f"no {kind}/{name} in the manifests")
