"""The real prediction service with an artificial delay in front of every request, for the latency
gate's test only, served by uvicorn on a loopback port from a thread of the test process.

The delay in milliseconds is read per request from a file, so one running service is measured at
two delays. The gate's own path starts the service in a new process (as the benchmark does); on
this loaded 2-core machine that start alone takes 15-70 s, so the test serves from its own process,
where feast, MLflow and ONNX Runtime are already imported.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, Request, Response

from serving.app import create_app
from serving.settings import ServingSettings

READY_TIMEOUT_S = 120.0


def slow_app(settings: ServingSettings, delay_file: Path) -> FastAPI:
    app = create_app(settings)

    @app.middleware("http")
    async def delay(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        await asyncio.sleep(float(delay_file.read_text()) / 1000)
        return await call_next(request)

    return app


@contextmanager
def serving_in_thread(app: FastAPI, port: int) -> Iterator[str]:
    """``app`` on 127.0.0.1:``port`` until the block ends; yields its base URL once it is ready."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", access_log=False))
    thread = threading.Thread(target=server.run, name="slow-service", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ready(url):
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"the service on {url} did not become ready")
            time.sleep(0.1)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
