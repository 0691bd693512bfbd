"""Calibration checks saved by several quality jobs at once (two CronJob pods, a shell beside the
schedule): real processes, each saving its own versions round after round while this one reads the
file. No version is lost and the file is whole JSON at every read."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mlops.errors import RunLockedError
from mlops.run_lock import waiting_lock
from monitoring.calibration_guard import CHECKS_FILE, CalibrationCheck, read_checks, save_checks

pytestmark = pytest.mark.integration

WRITERS = 4
ROUNDS = 40

# One writer: says it is ready (its imports done), waits for the go file, then saves version
# "<writer>.<round>" each round (a check of its own, labelled = round) and reads the file back.
_WRITER = """
import json, sys, time
from datetime import UTC, datetime
from pathlib import Path
import pytest

from mlops.errors import RunLockedError
from mlops.run_lock import waiting_lock
from monitoring.calibration_guard import CHECKS_FILE, CalibrationCheck, save_checks

directory, writer, rounds, go = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
(go.parent / f"ready-{writer}").touch()
while not go.exists():
    time.sleep(0.001)
for round_ in range(rounds):
    version = f"{writer}.{round_}"
    save_checks(directory, [CalibrationCheck(model_version=version, checked_at=datetime.now(UTC),
                                             labelled=round_, ece=0.01)])
    stored = json.loads((directory / CHECKS_FILE).read_text(encoding="utf-8"))
    assert version in stored, f"{version} lost right after its own save"
"""


def test_concurrent_savers_in_separate_processes_lose_no_version_and_never_tear_the_file(tmp_path: Path) -> None:
    directory, go = tmp_path / "monitoring", tmp_path / "go"
    errors = [tmp_path / f"stderr-{writer}" for writer in range(WRITERS)]
    writers = []
    for writer, error in enumerate(errors):
        with error.open("w") as stderr:
            writers.append(subprocess.Popen(
                [sys.executable, "-c", _WRITER, str(directory), str(writer), str(ROUNDS), str(go)], stderr=stderr))
    reads = 0
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("ready-*"))) < WRITERS and time.monotonic() < deadline:
            time.sleep(0.01)  # they import meanwhile; all start at once from the go file
        go.touch()
        while any(w.poll() is None for w in writers):
            path = directory / CHECKS_FILE
            if path.exists():
                json.loads(path.read_text(encoding="utf-8"))  # a reader never meets half a file
                reads += 1
            time.sleep(0.001)
    finally:
        for writer_process in writers:
            writer_process.kill()
            writer_process.wait()
    failures = [e.read_text() for e, w in zip(errors, writers, strict=True) if w.returncode != 0]

    assert failures == []
    checks = read_checks(directory)
    expected = {f"{writer}.{round_}": round_ for writer in range(WRITERS) for round_ in range(ROUNDS)}
    assert {version: check.labelled for version, check in checks.items()} == expected
    assert reads > 0
    # Only the file and its lock stay: no temporary file of a writer is left behind.
    assert sorted(p.name for p in directory.iterdir()) == [CHECKS_FILE, CHECKS_FILE + ".lock"]


def test_a_save_keeps_the_checks_of_other_versions_and_replaces_its_own(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    save_checks(tmp_path, [CalibrationCheck(model_version="1", checked_at=now, labelled=10, ece=0.2),
                           CalibrationCheck(model_version="2", checked_at=now, labelled=20, ece=0.1)])
    save_checks(tmp_path, [CalibrationCheck(model_version="2", checked_at=now, labelled=30, ece=0.03)])

    assert {v: (c.labelled, c.ece) for v, c in read_checks(tmp_path).items()} == {"1": (10, 0.2), "2": (30, 0.03)}
    assert oct((tmp_path / CHECKS_FILE).stat().st_mode & 0o777) == oct(0o644)


def test_a_save_waits_for_the_lock_and_gives_up_naming_the_holder(tmp_path: Path) -> None:
    lock = tmp_path / "checks.lock"
    held = rf"{lock} is still held by pid \d+ after 0.2 s"
    with waiting_lock(lock), pytest.raises(RunLockedError, match=held), waiting_lock(lock, timeout_s=0.2):
        pass
    with waiting_lock(lock, timeout_s=0.2):  # released when its holder's block ended
        assert lock.read_text().strip().isdigit()
