"""Pydantic's validation errors as one line a person reads: ``field.path: message``, joined."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


def _location(error: Any, prefix: str | None) -> str:
    return ".".join(str(part) for part in ((prefix,) if prefix else ()) + tuple(error["loc"]))


def one_line(exc: ValidationError, prefix: str | None = None) -> str:
    """Each of pydantic's errors as ``field.path: message``, joined on one line."""
    parts = []
    for error in exc.errors():
        message = str(error["msg"]).removeprefix("Value error, ")
        where = _location(error, prefix)
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def first_field(exc: ValidationError, prefix: str | None = None) -> str | None:
    """The path of the first error's field (``prefix`` first), or None for an error of the whole."""
    errors = exc.errors()
    return (_location(errors[0], prefix) or None) if errors else None
