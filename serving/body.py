"""Reading a request body defensively: JSON content type (415), size limit (413), any malformed
body a 4xx naming the problem, never a 500 (deep nesting included).

orjson parses the common case fast and refuses nesting deeper than 1024 levels. A body it
refuses is parsed again by Python's json only to name the problem better: that parser accepts
NaN/Infinity, so such a value reaches the schema and is refused there by field name.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi import Request, Response
from pydantic import BaseModel, ValidationError

from mlops.errors import InputError
from serving.errors import invalid_body


class PayloadTooLargeError(InputError):
    http_status = 413


class UnsupportedMediaTypeError(InputError):
    http_status = 415


async def read_json(request: Request, max_bytes: int, *, untyped_is_json: bool = False) -> Any:
    """The parsed JSON body; 415 unless the content type is JSON, 413 beyond ``max_bytes``, 422 if malformed.

    ``untyped_is_json``: a body without a content type is read as JSON (standard Open Inference
    Protocol clients send none); another declared type is still a 415.
    """
    content_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    untyped = untyped_is_json and not content_type
    if not untyped and content_type != "application/json" and not content_type.endswith("+json"):
        raise UnsupportedMediaTypeError(
            f"content-type must be application/json, got {content_type or 'none'!r}", field="content-type")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLargeError(f"body of {declared} bytes exceeds the limit of {max_bytes}", field="body")
    raw = bytearray()
    async for chunk in request.stream():  # a chunked body has no length header: count as it arrives
        raw += chunk
        if len(raw) > max_bytes:
            raise PayloadTooLargeError(f"body exceeds the limit of {max_bytes} bytes", field="body")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as fast_error:
        return _slow_parse(bytes(raw), fast_error)


def _slow_parse(raw: bytes, fast_error: orjson.JSONDecodeError) -> Any:
    try:
        return json.loads(raw)
    except RecursionError as exc:
        error = {"type": "json_invalid", "loc": (), "msg": "body is nested too deeply"}
        raise invalid_body([error]) from exc
    except ValueError as exc:  # JSONDecodeError, or bytes that are not text at all
        error = {"type": "json_invalid", "loc": (), "msg": f"body is not valid JSON: {exc}"}
        raise invalid_body([error]) from exc
    except Exception as exc:  # whatever else the stdlib parser raises, the body is malformed
        error = {"type": "json_invalid", "loc": (), "msg": f"body is not valid JSON: {fast_error}"}
        raise invalid_body([error]) from exc


def validate(data: Any, model: type[BaseModel]) -> BaseModel:
    """``data`` as ``model``; any schema violation is a 422 naming the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_body(exc.errors(include_url=False)) from exc
    except RecursionError as exc:
        raise invalid_body([{"type": "value_error", "loc": (), "msg": "body is nested too deeply"}]) from exc


def json_response(body: Any, status_code: int = 200) -> Response:
    """``body`` serialized by orjson (FastAPI's own serialization costs more per small answer)."""
    return Response(content=orjson.dumps(body), status_code=status_code, media_type="application/json")


def openapi_body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` declaring ``model`` as the JSON body of a route that parses its body by hand.

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

    return {"requestBody": {"required": required, "content": {"application/json": {"schema": inline(schema)}}}}
