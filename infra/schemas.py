"""Schema validation of built manifests, offline.

Core kinds are checked against the Kubernetes OpenAPI schemas that kubernetes-validate ships, in
their strict form (unknown fields fail). Custom resources are checked against the
``openAPIV3Schema`` of their CRD (the official CRDs in ../shared/crds), made strict the way the API
server's strict field validation is: an object schema that lists its properties rejects others
unless it says ``x-kubernetes-preserve-unknown-fields``. Their metadata is checked as an ObjectMeta.
An object whose kind is neither a core kind nor a known CRD fails. CEL rules
(``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource

from mlops.errors import ManifestError

KUBERNETES_VERSION = "1.32.0"
_CORE_SCHEMAS = f"kubernetes-json-schema/v{KUBERNETES_VERSION}-local-strict"
_OBJECT_META = "/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

Schema = dict[str, Any]


def strict_openapi(schema: Schema) -> Schema:
    """A CRD's OpenAPI v3 schema as JSON Schema, with unknown fields rejected."""
    out: Schema = {key: value for key, value in schema.items() if not key.startswith("x-kubernetes")}
    for key in ("properties", "patternProperties"):
        if key in out:
            out[key] = {name: strict_openapi(sub) for name, sub in out[key].items()}
    for key in ("items", "not"):
        if isinstance(out.get(key), dict):
            out[key] = strict_openapi(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict_openapi(out["additionalProperties"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in out:
            out[key] = [strict_openapi(sub) for sub in out[key]]
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if ("properties" in out and "additionalProperties" not in out
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    # libyaml's loader: the CRDs are megabytes of YAML.
    for document in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
        if isinstance(document, dict):
            yield document


class SchemaValidator:
    """Validates objects by kind; CRD schemas are read once from ``crd_dir`` (searched recursively)."""

    def __init__(self, crd_dir: Path) -> None:
        if not crd_dir.is_dir():
            raise ManifestError(f"CRD schema directory {crd_dir} does not exist (expected ../shared/crds)")
        self.crd_dir = crd_dir
        self._validators: dict[tuple[str, str], jsonschema.protocols.Validator | None] = {}

    @cached_property
    def _core_dir(self) -> Any:
        return resources.files("kubernetes_validate").joinpath(_CORE_SCHEMAS)

    @cached_property
    def _registry(self) -> Registry[Any]:
        definitions = json.loads(self._core_dir.joinpath("_definitions.json").read_text())
        # Crawled once: an uncrawled registry is crawled again on every $ref lookup.
        registry: Registry[Any] = Registry().with_resource("/api/_definitions.json",
                                                           Resource.from_contents(definitions))
        return registry.crawl()

    @cached_property
    def _crd_schemas(self) -> dict[tuple[str, str], Schema]:
        """(apiVersion, kind) -> OpenAPI schema, for every served version of every CRD."""
        schemas: dict[tuple[str, str], Schema] = {}
        for path in sorted(self.crd_dir.rglob("*.yaml")):
            for crd in _documents(path):
                if crd.get("kind") != "CustomResourceDefinition":
                    continue
                group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
                for version in crd["spec"]["versions"]:
                    if not version.get("served", False):
                        continue
                    schemas[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
        return schemas

    def _crd_schema(self, api_version: str, kind: str) -> Schema | None:
        openapi = self._crd_schemas.get((api_version, kind))
        if openapi is None:
            return None
        schema = strict_openapi(openapi)
        schema["properties"]["metadata"] = {"$ref": _OBJECT_META}
        schema["properties"].pop("status", None)
        return schema

    def _core_schema(self, api_version: str, kind: str) -> Schema | None:
        full_group, _, version = api_version.rpartition("/")
        # kubernetes-validate's file names: <kind>-<first part of the group>-<version>.json
        group = full_group.split(".")[0]
        file = self._core_dir.joinpath(f"{kind.lower()}-{group}-{version}.json" if group
                                       else f"{kind.lower()}-{version}.json")
        if not file.is_file():
            return None
        schema: Schema = json.loads(file.read_text())
        # Files also exist for nested types (e.g. configmapkeyselector-v1): only top-level kinds count.
        declared = schema.get("x-kubernetes-group-version-kind", [])
        if not any(gvk["kind"] == kind and gvk["group"] == full_group and gvk["version"] == version
                   for gvk in declared):
            return None
        return schema

    def _validator(self, api_version: str, kind: str) -> jsonschema.protocols.Validator | None:
        key = (api_version, kind)
        if key not in self._validators:
            schema = self._crd_schema(api_version, kind) or self._core_schema(api_version, kind)
            self._validators[key] = (None if schema is None else
                                     jsonschema.Draft202012Validator(schema, registry=self._registry))
        return self._validators[key]

    def errors(self, obj: dict[str, Any]) -> list[str]:
        """Every schema violation of one object, as ``Kind/name: path: message`` lines."""
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        name = f"{kind or '<no kind>'}/{obj.get('metadata', {}).get('name', '<no name>')}"
        validator = self._validator(api_version, kind)
        if validator is None:
            return [f"{name}: unknown kind {kind!r} in {api_version!r} (not a Kubernetes kind, no CRD in "
                    f"{self.crd_dir})"]
        return [f"{name}: {'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
                for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))]

    def validate_all(self, objects: Iterable[dict[str, Any]]) -> list[str]:
        return [error for obj in objects for error in self.errors(obj)]
