"""Prediction service speed, side by side in one run, on one host (traffic to 127.0.0.1 only).

    .venv/bin/python benchmarks/serving_side_by_side.py [--home .mlops] [--seconds 10] [--connections 16]
        [--workers 1]

Needs a state directory with a production model (``make demo`` makes one). Measures, one after
the other on the same machine: (a) POST /predict with online features, (b) the Open Inference
Protocol infer route (REST, and its gRPC ModelInfer from a Python grpc.aio client: wrk speaks no
gRPC), (c) ``mlflow models serve`` on the same registered version, (d) a bare FastAPI JSON echo
under the same server settings (uvicorn, ``--workers``), (e) ONNX Runtime in
process. Then /predict's latency at half its peak rate, the time to ready (registry reachable,
and unreachable with the cached model) and resident memory.

The unreachable start is the same service on the same home with its SQLite store gone (moved
aside while it starts): the service names its store explicitly and never creates one, so that is
an outage to it, while the store stays the one the home's prediction log belongs to and the one
the reachable start cached its model for. A tracking URI of another (dead) store would be
refused by the log's claim and would find no cached model of its own.

``--seconds 1`` is the short mode tests/benchmarks runs (every row, every figure, in under a minute).

Each /predict names a random customer and merchant of the offline tables (a fresh transaction id
every time), as traffic spreads over cards; one hot card would measure its lock and its ever
longer history instead. Load comes from wrk when installed, else a Python client. The half-peak
row paces wrk: every connection waits a random (exponential) delay between its requests, so the
offered rate is about half the peak whatever the answers do; the achieved rate is printed.

Service processes may write bytecode (an installed image has it compiled; this machine sets
PYTHONDONTWRITEBYTECODE=1): the first start compiles what the service imports and is reported
apart from the ready times that follow.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np

from mlops import registry
from mlops.contract import load_contract
from mlops.features import compute_features
from mlops.histories import empty_history
from mlops.inference import OnnxModel
from mlops.settings import Settings
from mlops.store_location import relocate_store
from serving.oip_grpc import inference_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WRK_SCRIPT = """
counter = 0
pick = function(values, fallback)
  if #values == 0 then return fallback end
  return values[math.random(1, #values)]
end
request = function()
  counter = counter + 1
  local body = string.gsub(wrk.body, "__ID__", tostring(counter) .. "-" .. tostring(math.random(1, 1e9)))
  body = string.gsub(body, "__CUSTOMER__", pick(customers, "C000123"))
  body = string.gsub(body, "__MERCHANT__", pick(merchants, "M00042"))
  return wrk.format("POST", wrk.path, {["content-type"] = "application/json"}, body)
end
"""
# Open-loop pacing for wrk: a random pause with mean ``mean_delay_ms`` before each request.
WRK_PACING = """
delay = function()
  return math.floor(-math.log(1 - math.random()) * mean_delay_ms)
end
"""


SERVICE_APP = "serving.main:service_app"
MOMENT = "2026-03-02T12:00:00+00:00"
RAW = {"amount": 412.5, "merchant_category": "electronics", "channel": "online", "country": "NG"}


def predict_body() -> dict[str, Any]:
    """The /predict request every run sends (``__ID__`` becomes a fresh transaction id per request)."""
    return {"transaction_id": "T-__ID__", "customer_id": "__CUSTOMER__", "merchant_id": "__MERCHANT__",
            "event_timestamp": MOMENT, **RAW}


def service_command(port: int, app: str = SERVICE_APP, workers: int = 1) -> list[str]:
    """uvicorn serving the app factory ``app`` on loopback, as every row of this benchmark runs it."""
    return [str(BIN / "python"), "-m", "uvicorn", "--host", "127.0.0.1", "--no-access-log", "--port", str(port),
            "--workers", str(workers), "--factory", app]


def copy_home(home: Path, copy: Path) -> Path:
    """The registry and feature store of ``home`` in ``copy``: the benchmark's transactions are
    recorded there, never in the user's online store, and every run starts from the same histories
    (each /predict appends to its card's and merchant's history, so a reused store would slow down
    run after run). The model artifacts are copied too and the copy's store pointed at them, as
    ``mlops init`` does for a moved home (a copy that read the original's would be refused)."""
    copy.mkdir(parents=True)
    shutil.copy2(home / "mlflow.db", copy / "mlflow.db")
    shutil.copytree(home / "feast", copy / "feast", ignore=shutil.ignore_patterns("*-shm"))
    original = Settings(home=home)
    shutil.copytree(original.artifact_root, copy / original.artifact_root.relative_to(original.resolved_home))
    relocate_store(Settings(home=copy.resolve()))
    return copy.resolve()


def known_entities(settings: Settings) -> dict[str, list[str]]:
    """The customers and merchants of the offline store: the ids /predict requests draw from."""
    import pandas as pd

    from mlops.feature_store import require_offline

    contract = load_contract(settings.contract_path)
    keys = [contract.entity(v.entity).join_key for v in contract.feature_views]
    table = pd.read_parquet(require_offline(settings), columns=keys)
    return {key: sorted({str(k) for k in table[key]}) for key in keys}


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(command: list[str], env: dict[str, str], ready_url: str, log: Path) -> tuple[subprocess.Popen[bytes], float]:
    started = time.monotonic()
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | env
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=environment, stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT)
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


@contextmanager
def registry_down(settings: Settings) -> Iterator[None]:
    """The home's SQLite store moved aside while inside: an outage of the same store (see the module's doc)."""
    store = settings.resolved_home / "mlflow.db"
    aside = store.with_name(store.name + ".down")
    store.rename(aside)
    try:
        yield
    finally:
        aside.rename(store)


def served_from(url: str) -> str:
    """Where the service at ``url`` got its model: "registry" or "cache" (its /healthz)."""
    return str(httpx.get(f"{url}/healthz", timeout=10).json()["source"])


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (uvicorn's worker processes)."""
    pids = [pid, *(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    total_kb = 0
    for one in pids:
        status = Path(f"/proc/{one}/status").read_text()
        total_kb += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return total_kb / 1024


def _lua_list(values: list[str]) -> str:
    return "{" + ",".join(json.dumps(v) for v in values) + "}"


def wrk_run(url: str, body: dict[str, Any], seconds: int, connections: int, entities: dict[str, list[str]],
            rate: float | None = None) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f"wrk.body = {json.dumps(json.dumps(body))}\n"
                     f"customers = {_lua_list(entities.get('customer_id', []))}\n"
                     f"merchants = {_lua_list(entities.get('merchant_id', []))}\n{WRK_SCRIPT}")
        if rate is not None:
            script.write(f"mean_delay_ms = {1000 * connections / rate:.3f}\n{WRK_PACING}")
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
                       entities: dict[str, list[str]], rate: float | None) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    counter = itertools.count()
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=connections)
    text = json.dumps(body)
    customers, merchants = entities.get("customer_id") or ["C000123"], entities.get("merchant_id") or ["M00042"]
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        async def one() -> None:
            nonlocal errors
            started = time.perf_counter()
            content = (text.replace("__ID__", f"{next(counter)}-{time.time_ns()}")
                       .replace("__CUSTOMER__", random.choice(customers))
                       .replace("__MERCHANT__", random.choice(merchants)))
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


def infer_message(model_name: str, row: dict[str, Any], input_names: list[str]) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=model_name)
    for name in input_names:
        value = row[name]
        text = isinstance(value, str)
        message.inputs.add(name=name, datatype="BYTES" if text else "FP32", shape=[1, 1])
        message.raw_input_contents.append(struct.pack("<I", len(value.encode())) + value.encode() if text
                                          else np.float32(value).tobytes())
    return message


async def _load(address: str, message: pb.ModelInferRequest, seconds: float, connections: int) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    async with grpc.aio.insecure_channel(address) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=pb.ModelInferRequest.SerializeToString,
                                    response_deserializer=pb.ModelInferResponse.FromString)

        async def closed_loop() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    await infer(message, timeout=30)
                except grpc.aio.AioRpcError:
                    errors += 1
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(closed_loop() for _ in range(connections)))
    ordered = sorted(latencies)
    return {"rps": len(ordered) / seconds, "p50_ms": 1e3 * ordered[len(ordered) // 2],
            "p99_ms": 1e3 * ordered[int(len(ordered) * 0.99) - 1], "errors": errors}


def grpc_infer_load(address: str, message: pb.ModelInferRequest, seconds: float, connections: int
                    ) -> dict[str, float]:
    return asyncio.run(_load(address, message, seconds, connections))


@dataclass(frozen=True)
class Load:
    """How every HTTP row is loaded: duration, concurrency, the entities /predict draws from."""

    seconds: int
    connections: int
    entities: dict[str, list[str]]

    def run(self, url: str, body: dict[str, Any], rate: float | None = None) -> dict[str, float]:
        if shutil.which("wrk"):
            return wrk_run(url, body, self.seconds, self.connections, self.entities, rate)
        return asyncio.run(_python_load(url, body, self.seconds, self.connections, self.entities, rate))


def load(url: str, body: dict[str, Any], seconds: int, connections: int) -> dict[str, float]:
    """Closed-loop load with the fallback entities (the latency gate's measurement, as its baseline was taken)."""
    return Load(seconds, connections, {}).run(url, body)


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
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes of every HTTP row")
    args = parser.parse_args()
    if registry.alias_version(Settings(home=args.home)) is None:
        raise SystemExit(f"no production model under {args.home}; run `make demo` first")
    work = Path(tempfile.mkdtemp(prefix="bench-"))
    home = copy_home(args.home, work / "home")
    settings = Settings(home=home)
    version = registry.alias_version(settings)
    assert version is not None  # the copy's registry is the home's
    contract = load_contract(settings.contract_path)
    model = OnnxModel(registry.download_version(settings, version, work / "model").onnx_path)
    features = compute_features(contract, {v.view_name: empty_history(v) for v in contract.feature_views},
                                datetime.fromisoformat(MOMENT), RAW)
    row = {**RAW, **features}
    infer_body = {"id": "__ID__", "inputs": [
        {"name": n, "shape": [1, 1], "datatype": "BYTES" if isinstance(row[n], str) else "FP32", "data": [row[n]]}
        for n in model.input_names]}
    split_body = {"dataframe_split": {"columns": model.input_names, "data": [[row[n] for n in model.input_names]]}}
    grpc_port = free_port()
    env = {"MLOPS_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "MLOPS_GRPC_PORT": str(grpc_port)}
    load = Load(args.seconds, args.connections, known_entities(settings))
    results: dict[str, dict[str, float]] = {}
    starts: dict[str, float] = {}
    notes = [f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"]
    port = free_port()
    ready_url = f"http://127.0.0.1:{port}/v2/health/ready"
    first, first_s = start(service_command(port, workers=args.workers), env, ready_url, work / "first.log")
    stop(first)
    service, starts["ready, registry reachable, s"] = start(service_command(port, workers=args.workers), env,
                                                            ready_url, work / "service.log")
    starts["first start (compiles bytecode), s"] = first_s
    try:
        base = f"http://127.0.0.1:{port}"
        # With a cached model (the first start wrote it) a registry load slower than
        # MLOPS_REGISTRY_STARTUP_TIMEOUT_S makes the service ready on the cache: say which it was.
        notes.append(f"the start with the registry reachable was ready serving the {served_from(base)}'s model")
        results["(a) /predict with features"] = load.run(base + "/predict", predict_body())
        results["(a) /predict at half peak rate"] = load.run(base + "/predict", predict_body(),
                                                             rate=results["(a) /predict with features"]["rps"] / 2)
        results["(b) /v2/models/{name}/infer"] = load.run(f"{base}/v2/models/{settings.model_name}/infer", infer_body)
        results["(b) gRPC ModelInfer"] = grpc_infer_load(
            f"127.0.0.1:{grpc_port}", infer_message(settings.model_name, row, model.input_names), args.seconds,
            args.connections)
        starts["resident memory after load, MB"] = rss_mb(service.pid)
    finally:
        stop(service)

    with registry_down(settings):
        cached, cached_s = start(service_command(port, workers=args.workers), env, ready_url, work / "cached.log")
        try:
            source = served_from(f"http://127.0.0.1:{port}")
        finally:
            stop(cached)
    if source != "cache":  # the figure below would be a registry load's
        raise SystemExit(f"the start with the registry unreachable served from the {source}, not the cache")
    starts["ready, registry unreachable (cached model), s"] = cached_s

    mlflow_port = free_port()
    mlflow_server, _ = start([str(BIN / "mlflow"), "models", "serve", "-m", f"models:/{settings.model_name}/{version}",
                              "--env-manager", "local", "-h", "127.0.0.1", "-p", str(mlflow_port)],
                             {**env, "MLFLOW_TRACKING_URI": settings.resolved_tracking_uri},
                             f"http://127.0.0.1:{mlflow_port}/ping", work / "mlflow.log")
    try:
        results["(c) mlflow models serve"] = load.run(f"http://127.0.0.1:{mlflow_port}/invocations", split_body)
    finally:
        stop(mlflow_server)

    echo, _ = start(service_command(port, "benchmarks.echo_app:create_echo_app", args.workers), env,
                    f"http://127.0.0.1:{port}/docs", work / "echo.log")
    try:
        results["(d) bare FastAPI JSON echo"] = load.run(f"http://127.0.0.1:{port}/echo", predict_body())
    finally:
        stop(echo)
    results["(e) ONNX Runtime in process"] = in_process(model, row, args.seconds)
    notes.append(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    _print(results, starts, notes, shutil.which("wrk") is not None, args)


def _print(results: dict[str, dict[str, float]], starts: dict[str, float], notes: list[str], wrk: bool,
           args: argparse.Namespace) -> None:
    client = f"wrk -t1 -c{args.connections}" if wrk else f"python client, {args.connections} connections"
    print(f"\n{args.seconds} s per row, load from {client}, uvicorn --workers {args.workers} "
          "(half-peak row: each connection paced by a random delay)\n")
    print(f"| {'target':32} | {'req/s':>8} | {'p50 ms':>7} | {'p99 ms':>7} | {'errors':>6} |")
    print(f"|{'-' * 34}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 8}|")
    for name, r in results.items():
        print(f"| {name:32} | {r['rps']:8.0f} | {r['p50_ms']:7.2f} | {r['p99_ms']:7.2f} | {r['errors']:6.0f} |")
    ratio: Callable[[str, str], float] = lambda a, b: results[a]["rps"] / results[b]["rps"]  # noqa: E731
    print(f"\n(a)/(c) = {ratio('(a) /predict with features', '(c) mlflow models serve'):.1f}x (goal >= 5x); "
          f"(b)/(d) = {ratio('(b) /v2/models/{name}/infer', '(d) bare FastAPI JSON echo'):.0%} (goal >= 60 %); "
          f"p99 of (a) at half peak {results['(a) /predict at half peak rate']['p99_ms']:.1f} ms (goal <= 10 ms)")
    print(f"gRPC ModelInfer / REST infer = {ratio('(b) gRPC ModelInfer', '(b) /v2/models/{name}/infer'):.0%} "
          f"(gRPC from a Python client on the same cores, REST from {client})")
    workers = f"{args.workers} worker{'s' if args.workers > 1 else ''}"
    print(f"\n| {'start and memory (' + workers + ')':48} | {'value':>8} |")
    print(f"|{'-' * 50}|{'-' * 10}|")
    for name, value in starts.items():
        print(f"| {name:48} | {value:8.1f} |")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
