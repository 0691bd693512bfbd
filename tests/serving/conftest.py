"""Fixtures of the serving tests: the served platform, built once per session, copied per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from served_platform import ServedPlatform, built_platform, platform_copy, sample_body


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> ServedPlatform:
    """The trained, exported, registered and promoted platform (about a minute): built once per run,
    shared by the xdist workers (each reads it, none writes it)."""
    shared = None if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    return built_platform(tmp_path_factory, shared)


@pytest.fixture(scope="module")
def platform_home(built: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedPlatform]:
    """This module's own copy of the built platform; MLOPS_HOME points at it."""
    yield from platform_copy(built, tmp_path_factory)


@pytest.fixture(scope="module")
def body(platform_home: ServedPlatform) -> dict[str, Any]:
    """A valid /predict request for the busiest customer."""
    return sample_body(platform_home)
