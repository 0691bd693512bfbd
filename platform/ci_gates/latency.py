"""The latency gate: /predict's p99 under the serving benchmark's load against a committed baseline.

The measurement is the benchmark's own (benchmarks/serving_side_by_side.py: the same service
command, request body and load client, wrk when installed), run for the seconds and connections
the baseline records, against the model holding the serving alias under MLOPS_HOME. A baseline is
machine-specific: refresh it on the machine (class) that runs the gate (``make gates-baseline``).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ci_gates.outcome import GateOutcome, failed, passed
from ci_gates.settings import GateSettings
from mlops.errors import ConfigError, MLOpsError
from mlops.settings import Settings

GATE = "latency"
BASELINE = Path(__file__).resolve().parents[2] / "benchmarks" / "latency_baseline.json"


class LatencyBaseline(BaseModel):
    """One measurement of /predict, kept in the repository as the reference the gate compares with."""

    model_config = ConfigDict(extra="forbid")

    p99_ms: float = Field(gt=0)
    p50_ms: float = Field(gt=0)
    requests_per_s: float = Field(gt=0)
    seconds: int = Field(ge=1)
    connections: int = Field(ge=1)
    client: str
    machine: str
    measured_at: datetime
    note: str = "machine-specific: refresh with `make gates-baseline` on the machine that runs the gate"


def load_client() -> str:
    """The load generator the benchmark uses here: the figures of two clients are not comparable."""
    return "wrk -t1" if shutil.which("wrk") else "python"


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return f"{platform.node()}, {os.cpu_count()} CPUs {model}".strip()


def read_baseline(path: Path) -> LatencyBaseline:
    try:
        return LatencyBaseline.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no latency baseline at {path}; measure one with `make gates-baseline`") from None
    except ValidationError as exc:
        raise ConfigError(f"latency baseline {path} is malformed: {exc.errors()[0]['msg']} "
                          f"at {'.'.join(map(str, exc.errors()[0]['loc']))}") from None


@contextmanager
def running_service(settings: Settings, app: str) -> Iterator[str]:
    """The prediction service (app factory ``app``) on a free loopback port, as the benchmark starts it."""
    from benchmarks import serving_side_by_side as bench

    with_home = {"MLOPS_HOME": str(settings.resolved_home), "PATH": f"{bench.BIN}{os.pathsep}{os.environ['PATH']}"}
    settings.logs_dir.mkdir(parents=True, exist_ok=True)
    port = bench.free_port()
    try:
        service, _ = bench.start(bench.service_command(port, app), with_home,
                                 f"http://127.0.0.1:{port}/v2/health/ready", settings.logs_dir / "gate-latency.log")
    except SystemExit as exc:  # the benchmark script's way of saying the service never became ready
        raise MLOpsError(f"the service did not start: {str(exc)[-300:]}") from None
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        bench.stop(service)


def measure(url: str, seconds: int, connections: int) -> LatencyBaseline:
    """/predict under the benchmark's closed-loop load for ``seconds`` with ``connections``."""
    from benchmarks import serving_side_by_side as bench

    result = bench.load(f"{url}/predict", bench.predict_body(), seconds, connections)
    if result["errors"]:
        raise MLOpsError(f"{result['errors']:.0f} of the /predict requests failed under load; "
                         f"a latency of errors means nothing (see the service log)")
    return LatencyBaseline(p99_ms=result["p99_ms"], p50_ms=result["p50_ms"], requests_per_s=result["rps"],
                           seconds=seconds, connections=connections, client=load_client(), machine=machine(),
                           measured_at=datetime.now(UTC))


def _measure_service(settings: Settings, url: str | None, app: str, seconds: int, connections: int) -> LatencyBaseline:
    """Measure the service at ``url``, or one started here for the measurement."""
    if url is not None:
        return measure(url, seconds, connections)
    with running_service(settings, app) as started:
        return measure(started, seconds, connections)


def latency_gate(settings: GateSettings, baseline_path: Path = BASELINE, *, url: str | None = None,
                 app: str = "serving.main:service_app") -> GateOutcome:
    """Measure /predict (of ``url``, else of a service started here) and compare p99 with the baseline."""
    baseline = read_baseline(baseline_path)
    now = _measure_service(settings, url, app, baseline.seconds, baseline.connections)
    ratio = now.p99_ms / baseline.p99_ms
    limit = settings.gate_max_p99_ratio
    checked = (f"/predict p99 {now.p99_ms:.1f} ms vs baseline {baseline.p99_ms:.1f} ms = {ratio:.2f}x "
               f"(limit {limit:.2f}x; p50 {now.p50_ms:.1f} ms, {now.requests_per_s:.0f} req/s; "
               f"{baseline.seconds} s, {baseline.connections} connections, {now.client})")
    if now.client != baseline.client:
        return failed(GATE, checked, f"the baseline was measured with {baseline.client}, this run with "
                                     f"{now.client}: not comparable; refresh the baseline on this machine")
    if ratio > limit:
        return failed(GATE, checked, f"p99 is {ratio:.2f}x the baseline's, above {limit:.2f}x "
                                     f"(baseline from {baseline.machine}, {baseline.measured_at:%Y-%m-%d})")
    return passed(GATE, checked)


def refresh_baseline(settings: Settings, baseline_path: Path = BASELINE, *, seconds: int = 10,
                     connections: int = 16, url: str | None = None,
                     app: str = "serving.main:service_app") -> GateOutcome:
    """Measure /predict now and write it as the new baseline (commit the file)."""
    now = _measure_service(settings, url, app, seconds, connections)
    baseline_path.parent.mkdir(parents=True, exist_ok=True)
    baseline_path.write_text(json.dumps(now.model_dump(mode="json"), indent=2) + "\n")
    return passed(GATE, f"wrote baseline {baseline_path}: /predict p99 {now.p99_ms:.1f} ms, p50 {now.p50_ms:.1f} ms, "
                        f"{now.requests_per_s:.0f} req/s ({seconds} s, {connections} connections, {now.client})")
