"""A real Prometheus and Pushgateway (Debian packages) on loopback, for the tests that need them.

The platform's scrape configuration with 1 s scrape and rule intervals; each job scrapes the
target the caller names, or an unused port (a job with nothing to scrape)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

PROMETHEUS_DIR = Path(__file__).resolve().parents[1] / "monitoring" / "prometheus"
BINARIES = {name: shutil.which(name) for name in ("prometheus", "promtool", "prometheus-pushgateway")}
MISSING_REASON = ("needs Prometheus from Debian: apt-get install -y prometheus prometheus-pushgateway "
                  "(.ci/system-packages.sh, run by make test, installs it as root)")


@dataclass(frozen=True)
class PrometheusStack:
    gateway: str
    prometheus: str
    config_path: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert body["status"] == "success", (expr, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, deadline_s: float = 30) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {deadline_s} s")


def until(check: Callable[[], bool], what: str, deadline_s: float = 30) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.5)


@contextmanager
def prometheus_stack(work: Path, targets: dict[str, str] | None = None) -> Iterator[PrometheusStack]:
    """Start a Pushgateway and a Prometheus scraping it and ``targets`` (job name -> host:port)."""
    gateway_port, prometheus_port = free_port(), free_port()
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(PROMETHEUS_DIR / "alerts.yml")]
    wanted = {"pushgateway": f"127.0.0.1:{gateway_port}", **(targets or {})}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [wanted.get(job["job_name"], f"127.0.0.1:{free_port()}")]}]
    config_path = work / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    logs = (work / "pushgateway.log").open("w"), (work / "prometheus.log").open("w")
    processes = [
        # Debian's build persists to /var/lib/prometheus/pushgateway.data by default: shared between runs.
        subprocess.Popen([str(BINARIES["prometheus-pushgateway"]), f"--web.listen-address=127.0.0.1:{gateway_port}",
                          f"--persistence.file={work / 'pushgateway.data'}"],
                         stdout=logs[0], stderr=subprocess.STDOUT),
        subprocess.Popen([str(BINARIES["prometheus"]), f"--config.file={config_path}",
                          f"--storage.tsdb.path={work / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                         stdout=logs[1], stderr=subprocess.STDOUT),
    ]
    try:
        stack = PrometheusStack(f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{prometheus_port}",
                                config_path)
        wait_ready(f"{stack.gateway}/-/ready")
        wait_ready(f"{stack.prometheus}/-/ready")
        yield stack
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        for log in logs:
            log.close()
