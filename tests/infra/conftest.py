"""Fixtures of the infra tests: the kustomize overlays built once per session (kubectl kustomize,
offline) and the schema validator."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from infra.schemas import SchemaValidator


@pytest.fixture(scope="session")
def built() -> dict[str, list[dict[str, Any]]]:
    from infra.manifests import OVERLAYS, build_overlay

    return {name: build_overlay(name) for name in OVERLAYS}


@pytest.fixture
def prod(built: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A private copy of the prod overlay's objects, free to mutate."""
    return copy.deepcopy(built["prod"])


@pytest.fixture(scope="session")
def validator() -> SchemaValidator:
    from infra.manifests import DEFAULT_CRD_DIR
    from infra.schemas import SchemaValidator

    return SchemaValidator(DEFAULT_CRD_DIR)
