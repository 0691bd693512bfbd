"""The outermost ASGI layer: routes answered directly behave as FastAPI routes do (error shapes,
request ids, metrics), and everything else still goes through FastAPI."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from fastapi import Request, Response
from fastapi.testclient import TestClient

from mlops.errors import InputError
from serving.body import json_response
from serving.errors import install_error_handlers
from serving.front import ServiceApp
from serving.metrics import ServiceMetrics

pytestmark = pytest.mark.integration


def _app() -> tuple[ServiceApp, ServiceMetrics]:
    metrics = ServiceMetrics()
    app = ServiceApp(metrics=metrics)
    install_error_handlers(app)

    async def refuse(request: Request) -> Response:
        raise InputError("amount must be finite", field="amount")

    async def crash(request: Request) -> Response:
        raise RuntimeError("a bug")

    async def echo_id(request: Request) -> Response:
        return json_response({"request_id": request.state.request_id, "path": request.url.path})

    @app.post("/declared")
    async def declared(request: Request) -> Response:
        raise InputError("amount must be finite", field="amount")

    for path, endpoint in (("/refuse", refuse), ("/crash", crash), ("/models/m/echo", echo_id)):
        app.answer_directly(path, path.replace("/m/", "/{name}/"), endpoint)
    return app, metrics


def _count(metrics: ServiceMetrics, route: str, status: str) -> float:
    return metrics.registry.get_sample_value("mlops_requests_total", {"route": route, "status": status}) or 0.0


def test_a_direct_route_answers_errors_as_a_declared_route_does() -> None:
    app, metrics = _app()
    with TestClient(app) as client:
        direct = client.post("/refuse", headers={"x-request-id": "given-1"})
        declared = client.post("/declared", headers={"x-request-id": "given-2"})

    assert (direct.status_code, declared.status_code) == (422, 422)
    assert direct.json() == declared.json()
    assert direct.json()["field"] == "amount"
    assert (direct.headers["x-request-id"], declared.headers["x-request-id"]) == ("given-1", "given-2")
    assert (_count(metrics, "/refuse", "422"), _count(metrics, "/declared", "422")) == (1.0, 1.0)


def test_a_direct_route_sees_the_request_id_and_is_counted_under_its_template() -> None:
    app, metrics = _app()
    with TestClient(app) as client:
        answer = client.post("/models/m/echo")
        other_method = client.get("/models/m/echo")

    assert answer.status_code == 200
    assert answer.json() == {"request_id": answer.headers["x-request-id"], "path": "/models/m/echo"}
    assert len(answer.headers["x-request-id"]) == 32  # assigned: none was given
    assert other_method.status_code == 404  # only POST is answered directly; FastAPI knows no such route
    assert (_count(metrics, "/models/{name}/echo", "200"), _count(metrics, "unmatched", "404")) == (1.0, 1.0)


def test_an_unexpected_error_in_a_direct_route_is_a_counted_500_with_a_request_id() -> None:
    app, metrics = _app()
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post("/crash", headers={"x-request-id": "given-3"})

    assert (answer.status_code, answer.text) == (500, "Internal Server Error")
    assert answer.headers["x-request-id"] == "given-3"
    assert _count(metrics, "/crash", "500") == 1.0


def test_with_a_middleware_added_the_direct_routes_go_through_it() -> None:
    app, metrics = _app()
    seen: list[str] = []

    async def direct(request: Request) -> Response:
        return json_response({"answered": "directly"})

    app.answer_directly("/declared", "/declared", direct)  # declared in FastAPI too, as the service's are

    @app.middleware("http")
    async def record(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        seen.append(request.url.path)
        return await call_next(request)

    with TestClient(app) as client:
        answer = client.post("/declared")

    assert (answer.status_code, answer.json()["field"]) == (422, "amount")  # FastAPI's route answered
    assert seen == ["/declared"]
    assert _count(metrics, "/declared", "422") == 1.0


FORKED_IDS = """
import os, sys
from fastapi.testclient import TestClient
sys.path[:0] = sys.argv[1:]
from test_front import _app
app, _ = _app()  # created before the fork, as a preloading server does
child = os.fork()
with TestClient(app) as client:
    role, request_id = ("child" if child == 0 else "parent"), client.post("/models/m/echo").headers["x-request-id"]
    # One write per line: both processes share the pipe, and print (unbuffered under PYTHONUNBUFFERED)
    # writes the text and its newline separately, so the two lines could interleave.
    os.write(1, f"{role} {request_id}\\n".encode())
if child:
    os.waitpid(child, 0)
"""


def test_request_ids_assigned_after_a_fork_differ_from_the_parents() -> None:
    # A fresh interpreter: forking this (threaded) test process could deadlock the child.
    here = Path(__file__).parent
    out = subprocess.run([sys.executable, "-c", FORKED_IDS, str(here), *sys.path], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    ids = dict(line.split() for line in out.splitlines())
    assert set(ids) == {"child", "parent"}
    assert len(ids["child"]) == len(ids["parent"]) == 32
    assert ids["child"][:24] != ids["parent"][:24]
