"""A test run that leaves an MLflow store in its working directory fails, naming it; one that was
there before the run, or none, does not fail the run (the real tests/conftest.py, in a scratch suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CONFTEST = Path(__file__).with_name("conftest.py")

LEAVES_A_STORE = """
import pytest
from pathlib import Path

pytestmark = pytest.mark.unit

def test_writes_where_it_runs():
    Path("mlflow.db").write_bytes(b"")
    Path("mlruns").mkdir()
"""


def _scratch(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makeini("[pytest]\nmarkers =\n    unit: u\n    integration: i\n    e2e: e\n")
    pytester.makepyfile(test_planted=source)
    return pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:cacheprovider")


def test_a_store_left_in_the_working_directory_fails_the_run(pytester: pytest.Pytester) -> None:
    result = _scratch(pytester, LEAVES_A_STORE)

    result.assert_outcomes(passed=1)  # the test itself passed; the run did not
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*the tests left an MLflow store in {pytester.path}: mlflow.db, mlruns*"])


def test_a_store_there_before_the_run_is_not_blamed_on_it(pytester: pytest.Pytester) -> None:
    (pytester.path / "mlflow.db").write_bytes(b"")
    (pytester.path / "mlruns").mkdir()

    result = _scratch(pytester, LEAVES_A_STORE.replace('Path("mlruns").mkdir()', "pass"))

    assert result.ret == pytest.ExitCode.OK
    assert "left an MLflow store" not in result.stdout.str()
