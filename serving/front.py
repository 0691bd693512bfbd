"""The service's outermost ASGI layer: a request id on every answer, the per-route request count
and latency, and the hot routes answered without FastAPI's routing and dependency injection.

POST /predict and POST /v2/models/<served model>/infer read their own bodies from the Request.
For them, FastAPI's layers did nothing but cost time: its middleware stack, route matching (each
route tried in turn) and dependency solving took about a third of /infer's CPU time. They stay
declared in FastAPI (the OpenAPI schema, other methods, other model names); their POSTs are
dispatched here by exact path, and their errors are answered by the handlers every other route
uses (serving.errors). Once a middleware is added to the app, every request goes through FastAPI.
"""

from __future__ import annotations

import itertools
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.types import Message, Receive, Scope, Send

from serving.errors import error_response
from serving.metrics import ServiceMetrics

Endpoint = Callable[[Request], Awaitable[Response]]
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class ServiceApp(FastAPI):
    """FastAPI with the front layer described in the module's note."""

    def __init__(self, *, metrics: ServiceMetrics, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.metrics = metrics
        self._direct: dict[str, tuple[str, Endpoint]] = {}
        self._reseed_request_ids()
        # A server that forks after creating the app (gunicorn --preload) must not repeat ids across workers.
        os.register_at_fork(after_in_child=self._reseed_request_ids)

    def answer_directly(self, path: str, route: str, endpoint: Endpoint) -> None:
        """Answer POST ``path`` with ``endpoint`` itself, counted under ``route`` (its declared path)."""
        self._direct[path] = (route, endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        started = time.perf_counter()
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else self._new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        id_header = (b"x-request-id", request_id.encode())
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", []).append(id_header)
            await send(message)

        # A middleware added to the app (tracing, CORS, a test's injected delay) must see every
        # request: with one installed, the hot routes go through FastAPI like the rest.
        direct = self._direct.get(scope["path"]) if scope["method"] == "POST" and not self.user_middleware else None
        try:
            if direct is None:
                await super().__call__(scope, receive, send_with_id)
            else:
                await self._answer_directly(direct[1], scope, receive, send_with_id)
        finally:
            route = direct[0] if direct is not None else getattr(scope.get("route"), "path", "unmatched")
            self.metrics.answered(route, status, time.perf_counter() - started)

    async def _answer_directly(self, endpoint: Endpoint, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        request = Request(scope, receive)
        try:
            response = await endpoint(request)
        except Exception as exc:  # noqa: BLE001 - mapped as every route's errors are
            try:
                response = await error_response(request, exc)
            except Exception:
                # As FastAPI's own outermost layer does: a plain 500, then the error for the server's log.
                await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
                raise
        await response(scope, receive, send)

    def _reseed_request_ids(self) -> None:
        self._id_prefix, self._id_counter = uuid.uuid4().hex[:24], itertools.count()

    def _new_request_id(self) -> str:
        """This process's random prefix and a counter: 32 hex digits, unique (a uuid4 per request cost 10 us)."""
        return f"{self._id_prefix}{next(self._id_counter):08x}"
