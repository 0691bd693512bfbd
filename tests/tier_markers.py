"""The suite's tiers (docs/testing.md): every test carries exactly one of the markers ``unit``,
``integration`` or ``e2e``, so ``make test-fast`` (``-m unit``) cannot pick up a slow test by
accident. A pytest plugin (tests/conftest.py loads it): collection stops with one error naming
every test without a tier, or with more than one, before any test runs.

A run of one tier (`-m unit`, exactly) does not import the test modules whose source never names
that tier: importing them (MLflow, Feast, Great Expectations, torch) is most of a fast run's time."""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "integration", "e2e")


def tier_problems(items: list[pytest.Item]) -> list[str]:
    """One line per test whose tier markers are not exactly one of TIERS."""
    problems = []
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
        if len(tiers) != 1:
            problems.append(f"{item.nodeid}: {'no tier' if not tiers else 'tiers ' + ', '.join(tiers)}")
    return problems


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: an untiered test must not vanish from a tier's run
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    problems = tier_problems(items)
    if problems:
        listed = "\n  ".join(problems)
        raise pytest.UsageError(
            f"{len(problems)} test(s) need exactly one tier marker ({', '.join(TIERS)}; "
            f"e.g. `pytestmark = pytest.mark.unit` in the module):\n  {listed}")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    tier = config.getoption("markexpr", "")
    if tier in TIERS and collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return f"pytest.mark.{tier}" not in collection_path.read_text()
    return None  # pytest's own rules decide
