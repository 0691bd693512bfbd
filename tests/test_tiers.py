"""The suite refuses a test without a tier: the real tests/conftest.py, planted in a scratch suite
beside one tiered and one untiered test, stops collection naming the untiered one, with or without
`-m unit` (a tier's run must not silently drop it)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CONFTEST = Path(__file__).with_name("conftest.py")

PLANTED = """
import pytest

@pytest.mark.unit
def test_tiered():
    pass

def test_forgotten():
    pass

@pytest.mark.unit
@pytest.mark.e2e
def test_two_tiers():
    pass
"""


@pytest.fixture
def scratch_suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_planted=PLANTED)
    pytester.makeini("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n")
    return pytester


@pytest.mark.parametrize("selection", [[], ["-m", "unit"]])
def test_an_untiered_test_stops_collection(scratch_suite: pytest.Pytester, selection: list[str]) -> None:
    result = scratch_suite.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider", *selection)

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = result.stderr.str()
    assert "2 test(s) need exactly one tier marker" in errors
    assert "test_planted.py::test_forgotten: no tier" in errors
    assert "test_planted.py::test_two_tiers: tiers e2e, unit" in errors
    assert "test_tiered" not in errors
    result.assert_outcomes()  # nothing ran


def test_a_suite_with_tiers_runs(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_planted="import pytest\npytestmark = pytest.mark.unit\ndef test_a():\n    pass\n")
    pytester.makeini("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n")

    result = pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider", "-m", "unit")

    result.assert_outcomes(passed=1)
