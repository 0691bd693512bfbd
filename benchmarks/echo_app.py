"""The framework floor: a bare FastAPI JSON echo, served with the prediction service's settings."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI


def create_echo_app() -> FastAPI:
    app = FastAPI(title="echo")

    @app.post("/echo")
    async def echo(body: dict[str, Any]) -> dict[str, Any]:
        return body

    return app
