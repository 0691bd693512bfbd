"""No MLflow store left behind: a pytest plugin (tests/conftest.py loads it) that fails the run when
it leaves an MLflow store in the directory pytest was started from (``mlflow.db``, ``mlruns/``,
``mlartifacts/``: what an MLflow client with no tracking URI creates in the working directory). A
test's stores belong in its temporary folder; a stray one once got committed at the repository
root."""

from __future__ import annotations

from pathlib import Path

import pytest

STRAY_STORES = ("mlflow.db", "mlruns", "mlartifacts")
_BEFORE = pytest.StashKey[frozenset[str]]()


def _present(folder: Path) -> frozenset[str]:
    return frozenset(name for name in STRAY_STORES if (folder / name).exists())


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_BEFORE] = _present(session.config.invocation_params.dir)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller checks once for the run
        return
    folder = session.config.invocation_params.dir
    before: frozenset[str] = session.stash.get(_BEFORE, frozenset())
    left = sorted(_present(folder) - before)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"the tests left an MLflow store in {folder}: {', '.join(left)} (a client without a tracking "
                   "URI; give it the test's own home)")
        if reporter is not None:
            reporter.write_line(message, red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
