"""How the service reports failures: every error is a JSON body naming what went wrong.

Platform errors keep the status and body their class defines (one mapping for the whole
platform); request validation errors name the offending field so a client can fix its call.
A server-side failure (5xx) tells the caller which part failed and the request id, never a path
or SQL: the full message goes to the service's log under that request id.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from mlops.errors import MLOpsError

log = logging.getLogger(__name__)
INVALID_REQUEST = "InvalidRequest"
OIP_PREFIX = "/v2/"
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


class ErrorResponse(BaseModel):
    """Body of every error answer (documented in the OpenAPI schema)."""

    model_config = ConfigDict(extra="forbid")

    error: str
    detail: str | list[dict[str, Any]]
    field: str | None = None
    request_id: str | None = Field(default=None, description="Set on server-side failures: the log's key.")


def field_name(loc: Sequence[int | str]) -> str:
    """``("body", "amount")`` -> ``"amount"``; a problem with the body as a whole -> ``"body"``."""
    parts = list(loc[1:] if loc and loc[0] in _LOCATIONS else loc)
    return ".".join(str(p) for p in parts) if parts else "body"


def _validation_detail(errors: Sequence[Any]) -> list[dict[str, Any]]:
    # Only loc/msg/type: "input" and "ctx" may hold NaN or exception objects, which are not JSON.
    return [
        {"field": field_name(e["loc"]), "loc": [str(p) for p in e["loc"]], "msg": str(e["msg"]),
         "type": str(e["type"])}
        for e in errors
    ]


class OipErrorResponse(BaseModel):
    """Error body of the Open Inference Protocol routes (/v2/...), as the protocol defines it."""

    model_config = ConfigDict(extra="forbid")

    error: str


def _respond(request: Request, status: int, body: dict[str, Any]) -> JSONResponse:
    if request.url.path.startswith(OIP_PREFIX):
        detail = body.get("detail")
        text = detail if isinstance(detail, str) else "; ".join(
            f"{d['field']}: {d['msg']}" for d in detail or []) or body["error"]
        return JSONResponse(status_code=status, content={"error": text})
    return JSONResponse(status_code=status, content=body)


_FAILED_PART = {"FeatureStoreError": "the feature store failed", "RegistryError": "the model registry failed",
                "ModelNotReadyError": "no model is loaded"}


async def _platform_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, MLOpsError):  # registered for MLOpsError only; narrows the type
        raise exc
    if exc.http_status < 500:
        return _respond(request, exc.http_status, exc.to_dict())
    request_id = str(getattr(request.state, "request_id", ""))
    name = type(exc).__name__
    log.warning("request %s answered %d: %s: %s", request_id, exc.http_status, name, exc.message)
    summary = exc.public or _FAILED_PART.get(name, "the service failed")
    body = ErrorResponse(error=name, detail=f"{summary} (details in the service log, request id {request_id})",
                         request_id=request_id)
    return _respond(request, exc.http_status, body.model_dump(exclude_none=True))


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestValidationError):
        raise exc
    detail = _validation_detail(exc.errors())
    field = detail[0]["field"] if detail else "body"
    body = ErrorResponse(error=INVALID_REQUEST, detail=detail, field=field)
    return _respond(request, 422, body.model_dump())


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, StarletteHTTPException):
        raise exc
    name = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
    response = _respond(request, exc.status_code, {"error": name, "detail": str(exc.detail)})
    response.headers.update(exc.headers or {})
    return response


_HANDLERS: tuple[tuple[type[Exception], Callable[[Request, Exception], Awaitable[JSONResponse]]], ...] = (
    (MLOpsError, _platform_error), (RequestValidationError, _invalid_request), (StarletteHTTPException, _http_error))


def install_error_handlers(app: FastAPI) -> None:
    for kind, handler in _HANDLERS:
        app.add_exception_handler(kind, handler)


async def error_response(request: Request, exc: Exception) -> JSONResponse:
    """The answer to ``exc`` that the installed handlers give; any other exception is re-raised (a 500)."""
    for kind, handler in _HANDLERS:
        if isinstance(exc, kind):
            return await handler(request, exc)
    raise exc


def invalid_body(errors: Sequence[Any]) -> RequestValidationError:
    """A validation error for body-level ``errors`` (their locations get the ``body`` prefix)."""
    return RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors])
