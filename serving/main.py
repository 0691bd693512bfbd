"""Entry point of the prediction service: ``mlops serve`` calls :func:`run`."""

from __future__ import annotations

import uvicorn

from mlops.settings import Settings
from serving.app import create_app


def run(settings: Settings | None = None) -> None:
    """Serve the production model on ``settings.host:settings.port`` until interrupted."""
    settings = settings or Settings()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port)


if __name__ == "__main__":
    run()
