"""How the service reports failures: every error is a JSON body naming what went wrong.

Platform errors keep the status and body their class defines (one mapping for the whole
platform); request validation errors name the offending field so a client can fix its call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from mlops.errors import MLOpsError

INVALID_REQUEST = "InvalidRequest"
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


class ErrorResponse(BaseModel):
    """Body of every error answer (documented in the OpenAPI schema)."""

    model_config = ConfigDict(extra="forbid")

    error: str
    detail: str | list[dict[str, Any]]
    field: str | None = None


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


async def _platform_error(_: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, MLOpsError):  # registered for MLOpsError only; narrows the type
        raise exc
    return JSONResponse(status_code=exc.http_status, content=exc.to_dict())


async def _invalid_request(_: Request, exc: Exception) -> JSONResponse:
    if not isinstance(exc, RequestValidationError):
        raise exc
    detail = _validation_detail(exc.errors())
    field = detail[0]["field"] if detail else "body"
    body = ErrorResponse(error=INVALID_REQUEST, detail=detail, field=field)
    return JSONResponse(status_code=422, content=body.model_dump())


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(MLOpsError, _platform_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)


def invalid_body(errors: Sequence[Any]) -> RequestValidationError:
    """A validation error for body-level ``errors`` (their locations get the ``body`` prefix)."""
    return RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors])
