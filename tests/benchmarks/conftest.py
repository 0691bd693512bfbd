"""Fixtures of the benchmarks' tests: the serving tests' trained home, built once per run, copied per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from served_platform import ServedPlatform, built_platform, platform_copy


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> ServedPlatform:
    """The served platform of tests/serving: on pytest-xdist the one home that folder builds (same
    shared folder and lock), so running a benchmark against it costs the run no second build."""
    shared = None if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    return built_platform(tmp_path_factory, shared)


@pytest.fixture(scope="module")
def platform_home(built: ServedPlatform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedPlatform]:
    """This module's own copy of the built platform; MLOPS_HOME points at it."""
    yield from platform_copy(built, tmp_path_factory)
