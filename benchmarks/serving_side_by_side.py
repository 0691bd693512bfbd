"""Prediction service speed, side by side in one run, on one host (traffic to 127.0.0.1 only).

    .venv/bin/python benchmarks/serving_side_by_side.py [--home .mlops] [--seconds 10] [--connections 16]

Needs a state directory with a production model (``make demo`` makes one). Measures, one after
the other on the same machine: (a) POST /predict with online features, (b) the Open Inference
Protocol infer route, (c) ``mlflow models serve`` on the same registered version, (d) a bare
FastAPI JSON echo under the same server settings, (e) ONNX Runtime in process. Then /predict's
latency at half its peak rate, the time to ready (registry reachable, and unreachable with the
cached model) and resident memory. Load comes from wrk when installed, else a Python client.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from mlops import registry
from mlops.contract import load_contract
from mlops.features import compute_features, empty_history
from mlops.inference import OnnxModel
from mlops.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WRK_SCRIPT = """
counter = 0
request = function()
  counter = counter + 1
  local body = string.gsub(wrk.body, "__ID__", tostring(counter) .. "-" .. tostring(math.random(1, 1e9)))
  return wrk.format("POST", wrk.path, {["content-type"] = "application/json"}, body)
end
"""


SERVICE_APP = "serving.main:service_app"
MOMENT = "2026-03-02T12:00:00+00:00"
RAW = {"amount": 412.5, "merchant_category": "electronics", "channel": "online", "country": "NG"}


def predict_body() -> dict[str, Any]:
    """The /predict request every run sends (``__ID__`` becomes a fresh transaction id per request)."""
    return {"transaction_id": "T-__ID__", "customer_id": "C000123", "merchant_id": "M00042",
            "event_timestamp": MOMENT, **RAW}


def service_command(port: int, app: str = SERVICE_APP) -> list[str]:
    """uvicorn serving the app factory ``app`` on loopback, as every row of this benchmark runs it."""
    return [str(BIN / "python"), "-m", "uvicorn", "--host", "127.0.0.1", "--no-access-log", "--port", str(port),
            "--factory", app]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(command: list[str], env: dict[str, str], ready_url: str, log: Path) -> tuple[subprocess.Popen[bytes], float]:
    started = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env={**os.environ, **env}, stdout=sink, stderr=subprocess.STDOUT,
                                   cwd=ROOT)
    while time.monotonic() - started < 180:
        if process.poll() is not None:
            raise SystemExit(f"{command[0]} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(ready_url, timeout=1).status_code == 200:
                return process, time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise SystemExit(f"{ready_url} not ready in 180 s")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


def wrk_run(url: str, body: dict[str, Any], seconds: int, connections: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f"wrk.body = {json.dumps(json.dumps(body))}\n{WRK_SCRIPT}")
        script.write("done = function(summary, latency, requests)\n"
                     "  io.write(string.format('RESULT %d %d %d %f %f\\n', summary.requests, "
                     "summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write "
                     "+ summary.errors.timeout, summary.duration, latency:percentile(50), latency:percentile(99)))\n"
                     "end\n")
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", script.name, url],
                         capture_output=True, text=True, check=True).stdout
    os.unlink(script.name)
    requests, errors, duration_us, p50_us, p99_us = re.search(r"RESULT (\S+) (\S+) (\S+) (\S+) (\S+)", out).groups()  # type: ignore[union-attr]
    return {"rps": int(requests) / (int(duration_us) / 1e6), "p50_ms": float(p50_us) / 1e3,
            "p99_ms": float(p99_us) / 1e3, "errors": int(errors)}


async def _python_load(url: str, body: dict[str, Any], seconds: float, connections: int,
                       rate: float | None) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    counter = itertools.count()
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=connections)
    text = json.dumps(body)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async def one() -> None:
            nonlocal errors
            started = time.perf_counter()
            content = text.replace("__ID__", f"{next(counter)}-{time.time_ns()}")
            response = await client.post(url, content=content, headers={"content-type": "application/json"})
            latencies.append(time.perf_counter() - started)
            errors += response.status_code != 200

        async def closed_loop() -> None:
            while time.perf_counter() < deadline:
                await one()

        if rate is None:
            await asyncio.gather(*(closed_loop() for _ in range(connections)))
        else:  # open loop: a request every 1/rate s whatever the answers do, so queueing shows in latency
            pending = []
            next_at = time.perf_counter()
            while next_at < deadline:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                pending.append(asyncio.create_task(one()))
                next_at += 1.0 / rate
            await asyncio.gather(*pending)
    ordered = sorted(latencies)
    return {"rps": len(ordered) / seconds, "p50_ms": 1e3 * ordered[len(ordered) // 2],
            "p99_ms": 1e3 * ordered[int(len(ordered) * 0.99) - 1], "errors": errors}


def load(url: str, body: dict[str, Any], seconds: int, connections: int, rate: float | None = None) -> dict[str, float]:
    if rate is None and shutil.which("wrk"):
        return wrk_run(url, body, seconds, connections)
    return asyncio.run(_python_load(url, body, seconds, connections, rate))


def in_process(model: OnnxModel, row: dict[str, Any], seconds: float) -> dict[str, float]:
    latencies = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        model.predict_proba([row])
        latencies.append(time.perf_counter() - started)
    return {"rps": len(latencies) / seconds, "p50_ms": 1e3 * statistics.median(latencies),
            "p99_ms": 1e3 * float(np.percentile(latencies, 99)), "errors": 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=ROOT / ".mlops")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    settings = Settings(home=args.home)
    version = registry.alias_version(settings)
    if version is None:
        raise SystemExit(f"no production model under {args.home}; run `make demo` first")
    contract = load_contract(settings.contract_path)
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    model = OnnxModel(registry.download_version(settings, version, work / "model").onnx_path)
    features = compute_features(contract, {v.view_name: empty_history(v) for v in contract.feature_views},
                                datetime.fromisoformat(MOMENT))
    row = {**RAW, **features}
    infer_body = {"id": "__ID__", "inputs": [
        {"name": n, "shape": [1, 1], "datatype": "BYTES" if isinstance(row[n], str) else "FP32", "data": [row[n]]}
        for n in model.input_names]}
    split_body = {"dataframe_split": {"columns": model.input_names, "data": [[row[n] for n in model.input_names]]}}
    env = {"MLOPS_HOME": str(args.home.resolve()), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    results: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    port = free_port()
    service, ready_s = start(service_command(port), env,
                             f"http://127.0.0.1:{port}/v2/health/ready", work / "service.log")
    try:
        base = f"http://127.0.0.1:{port}"
        results["(a) /predict with features"] = load(base + "/predict", predict_body(), args.seconds,
                                                     args.connections)
        half = results["(a) /predict with features"]["rps"] / 2
        results["(a) /predict at half peak rate"] = load(base + "/predict", predict_body(), args.seconds,
                                                         args.connections, rate=half)
        results["(b) /v2/models/{name}/infer"] = load(f"{base}/v2/models/{settings.model_name}/infer", infer_body,
                                                      args.seconds, args.connections)
        notes.append(f"service resident memory after load: {rss_mb(service.pid):.0f} MB; "
                     f"ready {ready_s:.1f} s after start (registry reachable)")
    finally:
        stop(service)

    dead = work / "dead-link"
    dead.symlink_to(work / "nowhere")
    cached, cached_s = start(service_command(port),
                             {**env, "MLOPS_TRACKING_URI": f"sqlite:///{dead}/mlflow.db"},
                             f"http://127.0.0.1:{port}/v2/health/ready", work / "cached.log")
    notes.append(f"ready {cached_s:.1f} s after start with the registry unreachable (cached model)")
    stop(cached)

    mlflow_port = free_port()
    mlflow_server, _ = start([str(BIN / "mlflow"), "models", "serve", "-m", f"models:/{settings.model_name}/{version}",
                              "--env-manager", "local", "-h", "127.0.0.1", "-p", str(mlflow_port)],
                             {**env, "MLFLOW_TRACKING_URI": settings.resolved_tracking_uri},
                             f"http://127.0.0.1:{mlflow_port}/ping", work / "mlflow.log")
    try:
        results["(c) mlflow models serve"] = load(f"http://127.0.0.1:{mlflow_port}/invocations", split_body,
                                                  args.seconds, args.connections)
    finally:
        stop(mlflow_server)

    echo, _ = start(service_command(port, "benchmarks.echo_app:create_echo_app"), env,
                    f"http://127.0.0.1:{port}/docs", work / "echo.log")
    try:
        results["(d) bare FastAPI JSON echo"] = load(f"http://127.0.0.1:{port}/echo", predict_body(), args.seconds,
                                                     args.connections)
    finally:
        stop(echo)
    results["(e) ONNX Runtime in process"] = in_process(model, row, args.seconds)
    _print(results, notes, shutil.which("wrk") is not None, args)


def _print(results: dict[str, dict[str, float]], notes: list[str], wrk: bool, args: argparse.Namespace) -> None:
    client = f"wrk -t1 -c{args.connections}" if wrk else f"python client, {args.connections} connections"
    print(f"\n{args.seconds} s per row, load from {client} (half-peak row: python open-loop client)\n")
    print(f"| {'target':32} | {'req/s':>8} | {'p50 ms':>7} | {'p99 ms':>7} | {'errors':>6} |")
    print(f"|{'-' * 34}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 8}|")
    for name, r in results.items():
        print(f"| {name:32} | {r['rps']:8.0f} | {r['p50_ms']:7.2f} | {r['p99_ms']:7.2f} | {r['errors']:6.0f} |")
    ratio: Callable[[str, str], float] = lambda a, b: results[a]["rps"] / results[b]["rps"]  # noqa: E731
    print(f"\n(a)/(c) = {ratio('(a) /predict with features', '(c) mlflow models serve'):.1f}x (goal >= 5x); "
          f"(b)/(d) = {ratio('(b) /v2/models/{name}/infer', '(d) bare FastAPI JSON echo'):.0%} (goal >= 60 %)")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
