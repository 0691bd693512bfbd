"""The FastAPI application: ``POST /predict`` and ``GET /healthz`` over the production model.

``create_app`` reads the contract (cheap, and the request schema is built from it); the lifespan
does the slow part: downloading the model that holds the serving alias and opening the feature
store. With no such model yet the app still starts and answers 503 until one is promoted and the
service restarts. Run with ``uvicorn serving.app:create_app --factory``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from mlops.contract import DataContract, load_contract
from mlops.errors import ModelNotReadyError
from mlops.settings import Settings
from serving.errors import ErrorResponse, install_error_handlers, invalid_body
from serving.predictor import Predictor, load_predictor
from serving.schemas import HealthResponse, build_request_model, build_response_model

log = logging.getLogger(__name__)

_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorResponse, "description": "The request is malformed; `field` names the culprit."},
    503: {"model": ErrorResponse, "description": "No model holds the serving alias yet."},
}


async def read_request(request: Request, model: type[BaseModel]) -> BaseModel:
    """Parse and validate the JSON body; any failure is a RequestValidationError (422), never a 500."""
    raw = await request.body()
    try:
        # Python's parser accepts NaN/Infinity, so such a value reaches the model and is refused
        # there by name, instead of as an anonymous syntax error.
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not text at all
        error = {"type": "json_invalid", "loc": (), "msg": f"body is not valid JSON: {exc}"}
        raise invalid_body([error]) from exc
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_body(exc.errors(include_url=False)) from exc


def _predictor(request: Request) -> Predictor:
    predictor: Predictor | None = request.app.state.predictor
    if predictor is None:
        raise ModelNotReadyError(request.app.state.not_ready)
    return predictor


def _lifespan(
    settings: Settings, contract: DataContract
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        serving_dir = settings.resolved_home / "serving"
        serving_dir.mkdir(parents=True, exist_ok=True)
        # A private download folder per process: replicas sharing a home never clobber each other.
        with TemporaryDirectory(dir=serving_dir, prefix="model-") as dest:
            app.state.predictor, app.state.not_ready = None, ""
            try:
                app.state.predictor = await run_in_threadpool(load_predictor, settings, contract, Path(dest))
            except ModelNotReadyError as exc:
                log.warning("starting without a model: %s", exc.message)
                app.state.not_ready = exc.message
            yield

    return lifespan


def create_app(settings: Settings | None = None) -> FastAPI:
    """The prediction service for ``settings`` (default: from ``MLOPS_*`` environment variables)."""
    settings = settings or Settings()
    contract = load_contract(settings.contract_path)
    request_model = build_request_model(contract)
    response_model = build_response_model(contract)
    app = FastAPI(title="Fraud prediction service", lifespan=_lifespan(settings, contract))
    install_error_handlers(app)

    @app.post(
        "/predict",
        response_model=response_model,
        responses=_ERROR_RESPONSES,
        # The body is parsed by hand (see read_request), so its schema is declared here for the docs.
        openapi_extra={"requestBody": {"required": True, "content": {
            "application/json": {"schema": request_model.model_json_schema()}}}},
    )
    async def predict(request: Request) -> dict[str, Any]:
        predictor = _predictor(request)
        payload = await read_request(request, request_model)
        # Feature lookup and inference block; keep them off the event loop.
        return await run_in_threadpool(predictor.predict, payload)

    @app.get("/healthz", response_model=HealthResponse, responses={503: _ERROR_RESPONSES[503]})
    async def healthz(request: Request) -> HealthResponse:
        served = _predictor(request).served
        return HealthResponse(model_name=served.name, model_version=served.version)

    return app
