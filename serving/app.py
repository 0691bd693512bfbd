"""The FastAPI application: the domain API (``/predict``, ``/predict/batch``), the Open Inference
Protocol v2 routes, the admin API and ``/metrics``, over the model the registry alias names.

``create_app`` reads the contract (cheap, and the request schema is built from it); the lifespan
does the slow part: loading the model that holds the serving alias (or the cached one when the
registry is down), opening the feature store and the prediction log, starting the alias poller.
With no model the app still starts: liveness answers, readiness and predictions answer 503 until
a version is promoted. Run with ``uvicorn serving.app:create_app --factory``.
"""

from __future__ import annotations

import functools
import gc
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from feature_repo.online import open_online_features
from mlops.contract import load_contract
from mlops.failure_log import FailureLog, failure_dir
from mlops.hidden_imports import hidden
from mlops.log_owner import claim_log, registry_identity
from mlops.prediction_log import PredictionLog, log_dir
from mlops.store_location import check_home_location
from serving import admin, oip
from serving.answering import PredictJob
from serving.body import json_response, openapi_body, read_model
from serving.docs import install_offline_docs
from serving.errors import ErrorResponse, install_error_handlers
from serving.front import ServiceApp
from serving.lifecycle import ModelManager
from serving.metrics import ServiceMetrics
from serving.predictor import Predictor
from serving.schemas import (
    HealthResponse,
    build_batch_models,
    build_request_model,
    build_response_model,
    request_example,
)
from serving.settings import ServingSettings
from serving.state import ServiceState

log = logging.getLogger(__name__)

_NEVER_IMPORTED = ("torch", "great_expectations", "evidently")
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorResponse, "description": "The body is larger than MLOPS_MAX_BODY_BYTES."},
    415: {"model": ErrorResponse, "description": "The body is not application/json."},
    422: {"model": ErrorResponse, "description": "The request is malformed; `field` names the culprit."},
    503: {"model": ErrorResponse, "description": "No model is loaded, or the feature store failed."},
}


def _lifespan(state: ServiceState) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        serving_dir = state.settings.resolved_home / "serving"
        serving_dir.mkdir(parents=True, exist_ok=True)
        # A private download folder per process: replicas sharing a home never clobber each other.
        with TemporaryDirectory(dir=serving_dir, prefix="model-") as dest:
            state.manager.workdir = Path(dest)
            await run_in_threadpool(state.manager.start)
            online = await run_in_threadpool(open_online_features, state.settings, state.contract)
            state.predictor = Predictor(state.contract, online, state.metrics,
                                        max_clock_skew=timedelta(seconds=state.settings.max_clock_skew_s))
            if online.local:  # Feast (the Redis path) hands pyarrow pandas objects; SQLite never does
                skip_pyarrows_pandas_probe()
            # Start-up leaves long-lived objects (FastAPI, pydantic; ~300,000 with MLflow's client); a full
            # collection scanned them all for ~240 ms, a stall that set /predict's p99. Frozen,
            # the collector skips them.
            grpc_server = await _start_grpc(state)
            gc.collect()
            gc.freeze()
            state.manager.start_polling()
            try:
                yield
            finally:
                if grpc_server is not None:
                    await grpc_server.stop(grace=5)
                await run_in_threadpool(state.manager.stop)
                state.shadow_pool.shutdown(wait=True)
                state.prediction_log.close()
                online.close()

    return lifespan


async def _start_grpc(state: ServiceState) -> Any:
    """The Open Inference Protocol's gRPC server when MLOPS_GRPC_PORT is set (grpc is imported only then)."""
    if not state.settings.grpc_port:
        return None
    from serving.oip_grpc.service import start_server

    return await start_server(state)


def keep_training_stack_out() -> None:
    """Make ``import torch`` fail in this process unless it is already loaded.

    feast imports torch eagerly whenever it is installed (seconds and hundreds of MB) and carries
    on without it; the service never needs it. A process that already has torch (a test that
    trained a model) keeps it.
    """
    for name in _NEVER_IMPORTED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None: "import halted" by design


def skip_pyarrows_pandas_probe() -> None:
    """Keep pyarrow from importing pandas only to ask whether the prediction log's rows are pandas objects.

    The first conversion of Python objects (the log's first write) imports pandas when it is
    installed, 36 MB of a worker's resident memory, to probe for Series and categoricals the
    service never hands it. Probed once here with pandas hidden, pyarrow takes pandas as absent for
    its probes; its explicit pandas calls (to_pandas) still import it, and so can any other module.
    """
    import pyarrow as pa

    with hidden("pandas"):
        pa.array([0])


def create_app(settings: ServingSettings | None = None) -> FastAPI:
    """The prediction service for ``settings`` (default: from ``MLOPS_*`` environment variables)."""
    settings = settings or ServingSettings()
    admin.check_admin_settings(settings)
    check_home_location(settings)  # a copied home is refused here, in one line, not served from the original
    # Named explicitly, the tracking store is never created by the service: a missing one is an outage.
    settings = settings.model_copy(update={"tracking_uri": settings.resolved_tracking_uri})
    # Its answers join this store's log only: another store's service on the same home stops here.
    claim_log(settings, settings.resolved_home / "predictions")
    contract = load_contract(settings.contract_path)
    metrics = ServiceMetrics()
    state = ServiceState(settings, contract, metrics,
                         ModelManager(settings, contract, settings.resolved_home / "serving", metrics),
                         PredictionLog(log_dir(settings), fsync_interval_s=settings.prediction_log_fsync_interval_s),
                         FailureLog(failure_dir(settings)))
    request_model = build_request_model(contract)
    response_model = build_response_model(contract)
    batch_request, batch_response = build_batch_models(request_model, response_model)
    app = ServiceApp(metrics=metrics, title=f"{contract.name} prediction service", lifespan=_lifespan(state),
                     docs_url=None, redoc_url=None)
    app.state.service = state
    install_error_handlers(app)
    install_offline_docs(app)

    @app.post("/predict", responses={200: {"model": response_model}, **_ERROR_RESPONSES},
              openapi_extra=openapi_body(request_model, example=request_example(contract)))
    async def predict(request: Request) -> Response:
        started = time.perf_counter()
        state.manager.require()  # 503 before reading the body when there is nothing to answer with
        payload = await read_model(request, request_model, settings.max_body_bytes)
        [single] = await state.predictions.submit(PredictJob([payload], request.state.request_id, started))
        return json_response(single)

    @app.post("/predict/batch", responses={200: {"model": batch_response}, **_ERROR_RESPONSES},
              openapi_extra=openapi_body(batch_request, example={"instances": [request_example(contract)]}))
    async def predict_batch(request: Request) -> Response:
        started = time.perf_counter()
        state.manager.require()
        batch = await read_model(request, batch_request, settings.max_body_bytes)
        job = PredictJob(batch.instances, request.state.request_id, started)  # type: ignore[attr-defined]
        return json_response({"predictions": await state.predictions.submit(job)})

    @app.get("/healthz", response_model=HealthResponse, responses={503: _ERROR_RESPONSES[503]})
    async def healthz() -> HealthResponse:
        """The served model; 503 while none is loaded (kept for existing clients; see /v2/health/*)."""
        loaded = state.manager.require()
        return HealthResponse(model_name=loaded.served.name, model_version=loaded.served.version,
                              registry=registry_identity(settings.resolved_tracking_uri), serving_alias=loaded.alias,
                              source="cache" if loaded.from_cache else "registry",
                              warning=state.manager.last_error)

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    oip_router = oip.build_router(state)
    app.include_router(oip_router)
    app.include_router(admin.build_router(state))
    app.answer_directly("/predict", "/predict", predict)
    infer = next(r.endpoint for r in oip_router.routes if isinstance(r, APIRoute) and r.path == oip.INFER_ROUTE)
    app.answer_directly(f"/v2/models/{settings.model_name}/infer", oip.INFER_ROUTE,
                        functools.partial(infer, name=settings.model_name))
    return app
