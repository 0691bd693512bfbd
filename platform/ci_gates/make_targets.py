"""The lint and tests gates: ``make lint`` and ``make test``, the project's own commands, delegated.

The command's output goes to a log file (CI uploads it); the gate line carries the command's own
summary (pytest's last line, mypy's or ruff's count) so a failure says why without the log.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from ci_gates.outcome import GateOutcome, failed, passed

# make's own "recipe failed" lines, its directory lines (printed when make runs under make) and blank
# lines say nothing about why.
_NOISE = re.compile(r"^(make(\[\d+\])?: (\*\*\*|Entering directory|Leaving directory)|\s*$)")
_PYTEST_SUMMARY = re.compile(r"^=+ (.* in [0-9.]+s.*) =+$")
# ruff's, import-linter's, mypy's and mkdocs --strict's verdicts
_ERROR_COUNT = re.compile(r"^(Found \d+ errors?.*|Success: .*|All checks passed!|Contracts: \d+ kept, \d+ broken\.|"
                          r"Aborted with \d+ warnings? in strict mode!)$")


def summary_line(output: str) -> str:
    """The line that says how the command ended: pytest's summary, the linters' counts, else the last line."""
    lines = output.splitlines()
    for line in reversed(lines):
        match = _PYTEST_SUMMARY.match(line.strip())
        if match:
            return match.group(1)
    # `make lint` runs ruff, lint-imports, mypy on the tree and then on each folder's conftest (the same
    # verdict six times), then mkdocs: each distinct verdict once, the last four.
    counts = list(dict.fromkeys(line.strip() for line in lines if _ERROR_COUNT.match(line.strip())))
    if counts:
        return "; ".join(counts[-4:])
    meaningful = [line.strip() for line in lines if not _NOISE.match(line)]
    return meaningful[-1][:300] if meaningful else "no output"


def make_gate(gate: str, target: str, repo_root: Path, log_dir: Path) -> GateOutcome:
    """Run ``make TARGET`` in ``repo_root``; PASS on exit code 0, with the command's summary line either way."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{gate}.log"
    started = time.monotonic()
    with log.open("w") as sink:
        code = subprocess.run(["make", target], cwd=repo_root, stdout=sink, stderr=subprocess.STDOUT,
                              check=False).returncode
    took = time.monotonic() - started
    checked = f"make {target}: exit {code} after {took:.0f} s, {summary_line(log.read_text(errors='replace'))!r}"
    if code != 0:
        return failed(gate, checked, f"make {target} failed", log)
    return passed(gate, checked)
