"""Long-running processes of the native stack: start detached, record, wait for readiness, stop by id.

Each process starts in its own session (its process group id is its pid), so stopping it reaches
the workers it forked (MLflow's uvicorn workers) and nothing else. A record keeps the pid and the
kernel's start time of that pid: a recorded id that now names another process (pid reuse after a
reboot) is never signalled.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from mlops.errors import StackError

POLL_S = 0.25
# Processes this interpreter started, kept so that stopping one also collects its exit status.
_children: dict[int, subprocess.Popen[bytes]] = {}


class ProcessRecord(BaseModel):
    """One started process: what it is, its pid, the kernel's start time of that pid, its log."""

    model_config = ConfigDict(extra="forbid")

    name: str
    pid: int
    started_ticks: int
    log: Path
    stop_signal: int = signal.SIGTERM


def _start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks); None when no such live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return None if fields[0] == "Z" else int(fields[19])


def is_running(record: ProcessRecord) -> bool:
    return _start_ticks(record.pid) == record.started_ticks


def start(name: str, argv: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
          user: str | None = None, stop_signal: int = signal.SIGTERM) -> ProcessRecord:
    """Start ``argv`` detached in a new session, output to ``log``; as ``user`` when given (root only)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    account = pwd.getpwnam(user) if user else None
    with log.open("ab") as out:
        try:
            process = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=dict(env or os.environ),
                start_new_session=True, user=account.pw_uid if account else None,
                group=account.pw_gid if account else None, extra_groups=[] if account else None)
        except OSError as exc:
            raise StackError(f"{name} could not start: {argv[0]}: {exc.strerror}") from exc
    _children[process.pid] = process
    ticks = _start_ticks(process.pid)
    if ticks is None:
        _children.pop(process.pid, None)
        raise StackError(f"{name} exited at once (exit code {process.wait()}); log: {log}")
    return ProcessRecord(name=name, pid=process.pid, started_ticks=ticks, log=log, stop_signal=stop_signal)


def wait_until(record: ProcessRecord, ready: Callable[[], bool], timeout_s: float) -> float:
    """Poll ``ready`` until it holds; StackError naming the service and its log when it dies or times out."""
    started = time.monotonic()
    while True:
        if not is_running(record):
            raise StackError(f"{record.name} exited before it was ready; log: {record.log}")
        try:
            if ready():
                return time.monotonic() - started
        except OSError:  # refused while starting up
            pass
        if time.monotonic() - started > timeout_s:
            raise StackError(f"{record.name} did not become ready within {timeout_s:.0f} s; log: {record.log}")
        time.sleep(POLL_S)


def stop(record: ProcessRecord, *, sig: int | None = None, timeout_s: float = 30.0) -> bool:
    """Signal the recorded process group and wait for the process to end; False when it was not running.

    SIGKILL follows when it outlives ``timeout_s``.
    """
    if not is_running(record):
        _reap(record.pid)
        return False
    try:
        os.killpg(record.pid, sig or record.stop_signal)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while is_running(record):
        _reap(record.pid)
        if time.monotonic() > deadline:
            os.killpg(record.pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout_s
        time.sleep(POLL_S / 2)
    _reap(record.pid)
    return True


def _reap(pid: int) -> None:
    """Collect the exit status when the process is our child (a test), so no zombie lingers."""
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def accepts(port: int, host: str = "127.0.0.1") -> bool:
    with socket.create_connection((host, port), timeout=1):
        return True


def read_records(path: Path) -> dict[str, ProcessRecord]:
    if not path.is_file():
        return {}
    return {name: ProcessRecord.model_validate(raw) for name, raw in json.loads(path.read_text()).items()}


def write_records(path: Path, records: Mapping[str, ProcessRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({name: r.model_dump(mode="json") for name, r in records.items()}, indent=2))
    tmp.replace(path)
