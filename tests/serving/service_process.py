"""A prediction service in its own process (real uvicorn, real sockets), as production runs it."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

STARTUP_TIMEOUT_S = 90.0

Answer = tuple[int, str | None]  # an answer's status and the model version that gave it


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ServiceProcess:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    ready_after_s: float

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_service(env: dict[str, str], log_path: Path, *, wait_for: str = "/v2/health/ready") -> ServiceProcess:
    """Start ``uvicorn serving.main:service_app`` with ``env``; returns once ``wait_for`` answers 200."""
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "serving.main:service_app", "--factory",
               "--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    service = ServiceProcess(process, url, log_path, 0.0)
    deadline = started + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"service exited with {process.returncode}:\n{service.output()}")
        try:
            if httpx.get(url + wait_for, timeout=2).status_code == 200:
                service.ready_after_s = time.monotonic() - started
                return service
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    service.stop()
    raise RuntimeError(f"service not ready after {STARTUP_TIMEOUT_S} s:\n{service.output()}")


@contextmanager
def predict_load(url: str, bodies: Callable[[int, int], dict[str, Any]], *, clients: int) -> Iterator[list[Answer]]:
    """``clients`` threads posting ``bodies(client, n)`` to /predict one after another until the block
    ends; the list yielded fills with the answers as they come."""
    stop = threading.Event()
    answers: list[Answer] = []

    def load(client_number: int) -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            for n in itertools.count():
                if stop.is_set():
                    return
                response = client.post("/predict", json=bodies(client_number, n))
                answers.append((response.status_code, response.json().get("model_version")))

    threads = [threading.Thread(target=load, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield answers
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def mlops(*args: str) -> str:
    """``mlops ARGS`` run in this process; its output, once it has exited 0."""
    from typer.testing import CliRunner

    from mlops_cli.app import app

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output
