"""Entry point of the prediction service: ``mlops serve [--workers N]`` calls :func:`run`."""

from __future__ import annotations

import logging
import os
import sys

import uvicorn
from fastapi import FastAPI

from serving.admin import check_admin_settings
from serving.app import create_app, keep_training_stack_out
from serving.settings import ServingSettings

WORKER_HEALTHCHECK_TIMEOUT_S = 60
_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging() -> None:
    """The service's own INFO lines (which model version it loaded, from where; alias moves) on stderr
    beside uvicorn's; without a handler Python would print only warnings. Once per process."""
    logger = logging.getLogger("serving")
    if any(getattr(handler, "_mlops_service", False) for handler in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    handler._mlops_service = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # a root handler someone adds must not print each line twice


def service_app() -> FastAPI:
    """The factory a server process calls (``uvicorn serving.main:service_app --factory``)."""
    keep_training_stack_out()
    configure_logging()
    # A progress bar per model download is noise in a service log.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    return create_app(ServingSettings())


def run(settings: ServingSettings | None = None, *, workers: int = 1) -> None:
    """Serve on ``settings.host:settings.port`` until interrupted; ``workers`` processes share the port.

    Workers read their settings from the same ``MLOPS_*`` environment, so they serve the same alias.
    """
    settings = settings or ServingSettings()
    check_admin_settings(settings)  # fail here, once, rather than in every worker
    # No access log: one line per request costs more than scoring it; /metrics counts requests.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if workers == 1:
        keep_training_stack_out()
        configure_logging()
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, access_log=False)
    else:
        # A worker importing ONNX Runtime (and MLflow, for a store read through it) on a busy machine
        # can miss uvicorn's 5 s health ping; it would be killed and restarted forever, never serving.
        uvicorn.run("serving.main:service_app", factory=True, host=settings.host, port=settings.port,
                    workers=workers, access_log=False, timeout_worker_healthcheck=WORKER_HEALTHCHECK_TIMEOUT_S)


if __name__ == "__main__":
    run()
