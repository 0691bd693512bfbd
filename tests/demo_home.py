"""The home of one real `mlops demo` run, shared by the tests that need one (tests/e2e/test_demo.py,
tests/native_stack/test_stack.py, tests/e2e/test_pipeline_e2e.py).

The demo is the CLI in a subprocess (kfp.local, a process per step, then the service and the replay
of the test split): about a minute and a half of two cores. It runs once per test run, whatever the
number of xdist workers: the first worker to take the lock in the run's shared temporary folder runs
it there and records its exit status and printed output; the others wait for the lock and read the
record. Under xdist a process of its own takes the lock first (:func:`start_in_background`, as soon as
a worker has collected a test that needs the demo), so the demo is built while the workers run other
modules instead of one worker building it and the others waiting. Each module works on its own copy
of the home (:func:`demo_copy`), its MLflow store pointed at the copy's own artifacts, so what one
module writes never reaches another's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from mlops.settings import Settings
from mlops.store_location import relocate_store

# test_demo's needs: enough rows and epochs for the model to catch some of the test split's frauds (its
# sample table must show a caught one), while most of the time is still the steps' process starts.
ROWS = 6000
MAX_EPOCHS = 15
# What the demo's settings must not inherit from the test process: it takes the defaults of MLOPS_HOME.
_UNSET = ("MLOPS_HOME", "MLOPS_PROFILE", "MLOPS_TRACKING_URI", "MLOPS_SETTINGS_JSON", "MLOPS_PORT",
          "MLFLOW_TRACKING_URI")


@dataclass(frozen=True)
class DemoRun:
    home: Path  # the demo's home, which no test writes to: copy it first (demo_copy)
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> None:
        assert self.returncode == 0, self.stdout[-3000:] + self.stderr[-3000:]


def run_demo(home: Path) -> DemoRun:
    """`mlops demo --rows ROWS` with MLOPS_HOME=home, an empty folder (the one above it is its working directory)."""
    env = {name: value for name, value in os.environ.items() if name not in _UNSET}
    env |= {"MLOPS_HOME": str(home), "MLOPS_MAX_EPOCHS": str(MAX_EPOCHS)}
    shutil.rmtree(home, ignore_errors=True)  # what a run that died holding the lock left: the demo starts afresh
    home.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, "-m", "mlops_cli", "demo", "--rows", str(ROWS)], env=env,
                            cwd=home.parent, capture_output=True, text=True, timeout=1400, check=False)
    return DemoRun(home, result.returncode, result.stdout, result.stderr)


def demo_run(shared_root: Path) -> DemoRun:
    """The run's one demo, in ``shared_root`` (the folder every pytest-xdist worker shares, or the
    session's own temporary folder without xdist): run by whoever takes the lock first, read by the rest."""
    home, record = shared_root / "demo-built" / "home", shared_root / "demo-built.json"
    with FileLock(f"{record}.lock"):
        if not record.exists():
            run = run_demo(home)
            record.write_text(json.dumps({"returncode": run.returncode, "stdout": run.stdout, "stderr": run.stderr}))
            return run
    recorded = json.loads(record.read_text())
    return DemoRun(home, recorded["returncode"], recorded["stdout"], recorded["stderr"])


def start_in_background(shared_root: Path) -> subprocess.Popen[bytes] | None:
    """Start :func:`demo_run` in a process of its own, once per ``shared_root`` (the first caller wins);
    returns that process to the caller that started it, None to the others."""
    shared_root.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(shared_root / "demo-started", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return None
    return subprocess.Popen([sys.executable, __file__, str(shared_root)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def demo_copy(run: DemoRun, home: Path) -> Path:
    """A copy of the demo's home at ``home``, its MLflow store pointed at the copy's artifacts (what
    `mlops init` does in a copied home); the feature definitions still name the original's offline files."""
    run.check()
    shutil.copytree(run.home, home, symlinks=True, ignore=shutil.ignore_patterns("*-shm"))
    relocate_store(Settings(home=home))
    return home


if __name__ == "__main__":
    demo_run(Path(sys.argv[1]))
