"""Reading a request body defensively: JSON content type (415), size limit (413), any malformed
body a 4xx naming the problem, never a 500 (deep nesting included).

The body is parsed and validated in one pass by pydantic's JSON parser (Rust): about half the
cost of parsing to Python objects and validating those. It refuses nesting deeper than about 200
levels as invalid JSON; it reads NaN and Infinity, so such a value reaches the schema and is
refused there by field name.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from fastapi import Request, Response
from pydantic import BaseModel, ValidationError

from mlops.errors import InputError
from serving.errors import invalid_body

ModelT = TypeVar("ModelT", bound=BaseModel)


class PayloadTooLargeError(InputError):
    http_status = 413


class UnsupportedMediaTypeError(InputError):
    http_status = 415


async def read_model(request: Request, model: type[ModelT], max_bytes: int, *, untyped_is_json: bool = False) -> ModelT:
    """The JSON body as ``model``; 415 unless the content type is JSON, 413 beyond ``max_bytes``, 422 if malformed.

    ``untyped_is_json``: a body without a content type is read as JSON (standard Open Inference
    Protocol clients send none); another declared type is still a 415.
    """
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    untyped = untyped_is_json and not content_type
    if not untyped and content_type != "application/json" and not content_type.endswith("+json"):
        raise UnsupportedMediaTypeError(
            f"content-type must be application/json, got {content_type or 'none'!r}", field="content-type")
    return parse_model(model, await read_bytes(request, max_bytes))


async def read_bytes(request: Request, max_bytes: int) -> bytearray:
    """The whole body, whatever its type; 413 beyond ``max_bytes`` (declared or counted as it arrives)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(f"body of {declared} bytes exceeds the limit of {max_bytes}", field="body")
    raw = bytearray()
    async for chunk in request.stream():  # a chunked body has no length header: count as it arrives
        raw += chunk
        if len(raw) > max_bytes:
            raise PayloadTooLargeError(f"body exceeds the limit of {max_bytes} bytes", field="body")
    return raw


def parse_model(model: type[ModelT], raw: bytes | bytearray) -> ModelT:
    """``raw`` JSON as ``model``; a 422 naming the field when it does not fit."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid_body(exc.errors(include_url=False)) from exc


def json_response(body: Any, status_code: int = 200) -> Response:
    """``body`` serialized by orjson (FastAPI's own serialization costs more per small answer)."""
    return Response(content=orjson.dumps(body), status_code=status_code, media_type="application/json")


def openapi_body(model: type[BaseModel], *, required: bool = True, example: Any = None) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the JSON body of a route that parses its body by hand,
    with ``example`` as the body Swagger's "Try it out" starts from (when given).

    The model's ``$defs`` are inlined: references relative to the model's own schema would not
    resolve inside the OpenAPI document.
    """
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(definitions[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    media: dict[str, Any] = {"schema": inline(schema)}
    if example is not None:
        media["example"] = example
    return {"requestBody": {"required": required, "content": {"application/json": media}}}
