"""CPU per request through the service's ASGI app in this process (no network, no HTTP server):
the bare FastAPI echo, the infer route and /predict, with 16 concurrent callers (one batch) and
with one caller at a time. Its figures are in docs/performance.md, "Serving".

    .venv/bin/python -m benchmarks.serving_in_process [--home .mlops] [--requests 1600]

Needs a home with a production model (``make demo``); runs on a copy of its registry and feature
store, as the side-by-side benchmark does.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from benchmarks.echo_app import create_echo_app
from benchmarks.serving_side_by_side import MOMENT, RAW, ROOT, copy_home, known_entities, predict_body
from mlops.contract import load_contract
from mlops.features import compute_features
from mlops.histories import empty_history
from serving.app import create_app
from serving.settings import ServingSettings


async def _call(app: FastAPI, path: str, body: bytes) -> None:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    if status != [200]:
        raise SystemExit(f"{path} answered {status}")


async def _cpu_per_request(app: FastAPI, path: str, body: Callable[[], bytes], requests: int, callers: int) -> float:
    for _ in range(2):  # the first round warms up; the second is measured
        started = time.process_time()
        for _ in range(requests // callers):
            await asyncio.gather(*(_call(app, path, body()) for _ in range(callers)))
    return (time.process_time() - started) / (requests // callers * callers) * 1e6


async def _measure(settings: ServingSettings, requests: int) -> None:
    contract = load_contract(settings.contract_path)
    entities = known_entities(settings)
    counter = itertools.count()

    def predict() -> bytes:
        text = json.dumps(predict_body()).replace("__ID__", f"{next(counter)}-{random.randint(1, 10**9)}")
        text = text.replace("__CUSTOMER__", random.choice(entities["customer_id"]))
        return text.replace("__MERCHANT__", random.choice(entities["merchant_id"])).encode()

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        model = app.state.service.manager.require().model
        row = {**RAW, **compute_features(contract, {v.view_name: empty_history(v) for v in contract.feature_views},
                                         datetime.fromisoformat(MOMENT), RAW)}
        infer = json.dumps({"id": "x", "inputs": [
            {"name": n, "shape": [1, 1], "datatype": "BYTES" if isinstance(row[n], str) else "FP32", "data": [row[n]]}
            for n in model.input_names]}).encode()
        echo = json.dumps(predict_body()).encode()
        targets = [("bare FastAPI JSON echo", create_echo_app(), "/echo", lambda: echo),
                   ("/v2/models/{name}/infer", app, f"/v2/models/{settings.model_name}/infer", lambda: infer),
                   ("/predict with features", app, "/predict", predict)]
        print(f"| {'route':26} | {'16 callers, µs CPU':>18} | {'one caller, µs CPU':>18} |")
        print(f"|{'-' * 28}|{'-' * 20}|{'-' * 20}|")
        for name, target, path, body in targets:
            together = await _cpu_per_request(target, path, body, requests, 16)
            alone = await _cpu_per_request(target, path, body, requests // 4, 1)
            print(f"| {name:26} | {together:18.0f} | {alone:18.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=ROOT / ".mlops")
    parser.add_argument("--requests", type=int, default=1600)
    args = parser.parse_args()
    home = copy_home(args.home, Path(tempfile.mkdtemp(prefix="bench-")) / "home")
    asyncio.run(_measure(ServingSettings(home=home), args.requests))


if __name__ == "__main__":
    main()
