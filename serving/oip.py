"""Open Inference Protocol v2 (REST) over the served model: health, model metadata, readiness, infer.

Standard clients (tritonclient, KServe's) work unchanged with JSON tensors. ``infer`` takes the
graph's own inputs (raw request fields plus the computed features), so it never touches the
feature store; each answered row is logged like a domain prediction. Errors are ``{"error": ...}``.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from mlops.contract import DataContract
from mlops.errors import InputError, NotFoundError
from serving.answering import InferJob
from serving.body import json_response, openapi_body, read_model
from serving.errors import OipErrorResponse
from serving.lifecycle import LoadedModel
from serving.schemas import MAX_BATCH
from serving.state import ServiceState

_STRING_TYPE = "tensor(string)"
_DATATYPES = {"tensor(float)": "FP32", _STRING_TYPE: "BYTES"}
Parameters = dict[Annotated[str, Field(max_length=64)], StrictStr | StrictInt | StrictFloat | StrictBool]
INFER_ROUTE = "/v2/models/{name}/infer"
_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": OipErrorResponse} for code in (404, 413, 415, 422, 503)}


class InferInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=64)]
    shape: Annotated[list[Annotated[int, Field(ge=0, le=MAX_BATCH)]], Field(min_length=1, max_length=2)]
    datatype: Literal["FP32", "FP64", "INT32", "INT64", "BYTES"]
    data: Annotated[list[StrictFloat | StrictInt | Annotated[StrictStr, Field(max_length=64)]],
                    Field(max_length=MAX_BATCH)]
    parameters: Parameters | None = None


class RequestedOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=64)]
    parameters: Parameters | None = None


class InferRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Annotated[str, Field(max_length=128)] | None = None
    parameters: Parameters | None = None
    inputs: Annotated[list[InferInput], Field(min_length=1, max_length=64)]
    outputs: Annotated[list[RequestedOutput], Field(max_length=8)] | None = None


class OutputTensor(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    datatype: Literal["FP32"]
    shape: list[int]
    data: list[float]


class InferResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_name: str
    model_version: str
    id: str
    outputs: list[OutputTensor]


Bounds = dict[str, tuple[float | None, float | None]]


FP32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max: beyond it a value is inf in the graph


def _contract_bounds(contract: DataContract) -> Bounds:
    """The contract's range of each raw input and of each computed feature (non-negative counts, ...)."""
    raw: Bounds = {name: (contract.column(name).min, contract.column(name).max) for name in contract.raw_inputs}
    return {**raw, **contract.feature_bounds}


def _columns(request: InferRequest, loaded: LoadedModel, bounds: Bounds) -> tuple[int, dict[str, list[Any]]]:
    """Check every tensor against the graph and the contract; the rows' count and the columns."""
    types = loaded.model.input_types
    given = [t.name for t in request.inputs]
    if len(given) != len(types) or set(given) != types.keys():
        missing, unknown = sorted(set(types) - set(given)), sorted(set(given) - set(types))
        raise InputError(f"inputs must be exactly the model's, once each: missing {missing}, unknown {unknown}",
                         field="inputs")
    n = len(request.inputs[0].data)
    if n == 0 or any(len(t.data) != n for t in request.inputs):
        raise InputError("every input tensor must hold the same, non-zero number of rows", field="inputs")
    columns: dict[str, list[Any]] = {}
    for tensor in request.inputs:
        name, data = tensor.name, tensor.data
        if tensor.shape != [n] and tensor.shape != [n, 1]:
            raise InputError(f"input {name!r}: shape {tensor.shape} does not match its {n} values", field=name)
        text = types[name] == _STRING_TYPE
        if text != (tensor.datatype == "BYTES") or (text and not all(isinstance(v, str) for v in data)):
            raise InputError(f"input {name!r} must be {_DATATYPES.get(types[name], types[name])}", field=name)
        if not text:
            _check_numbers(name, data, bounds.get(name, (None, None)), types[name])
        columns[name] = data
    return n, columns


def _check_numbers(name: str, values: list[Any], bounds: tuple[float | None, float | None], kind: str) -> None:
    low, high = bounds
    for value in values:
        if isinstance(value, str):
            raise InputError(f"input {name!r} must be {_DATATYPES.get(kind, kind)}", field=name)
        # A comparison, not math.isfinite: that raises OverflowError for an int of 400 digits. NaN fails it too.
        if not -FP32_MAX <= value <= FP32_MAX:
            raise InputError(f"input {name!r} must be a finite FP32 number", field=name)
        if (low is not None and value < low) or (high is not None and value > high):
            raise InputError(f"input {name!r} value {value} is outside the contract's range {bounds}", field=name)


def _model(state: ServiceState, name: str) -> LoadedModel:
    if name != state.settings.model_name:
        raise NotFoundError(f"model {name!r} is not served here; this service serves {state.settings.model_name!r}")
    return state.manager.require()


def build_router(state: ServiceState) -> APIRouter:
    router = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"], responses=_ERRORS)
    # A default, not an Annotated alias: annotations are strings here and FastAPI reads module globals.
    model_name = Path(max_length=128, examples=[state.settings.model_name])
    bounds = _contract_bounds(state.contract)

    @router.get("/health/live")
    async def live() -> dict[str, bool]:
        """The process answers; never touches the registry."""
        return {"live": True}

    @router.get("/health/ready")
    async def ready() -> dict[str, bool]:
        """A model is loaded (503 until one is)."""
        state.manager.require()
        return {"ready": True}

    @router.get("/models/{name}")
    async def metadata(name: str = model_name) -> dict[str, Any]:
        loaded = _model(state, name)
        session = loaded.model.session
        return {
            "name": name, "versions": [loaded.served.version], "platform": "onnxruntime_onnx",
            "inputs": [{"name": i.name, "datatype": _DATATYPES.get(i.type, i.type), "shape": [-1, 1]}
                       for i in session.get_inputs()],
            "outputs": [{"name": o.name, "datatype": "FP32", "shape": [-1, 1]} for o in session.get_outputs()],
        }

    @router.get("/models/{name}/ready")
    async def model_ready(name: str = model_name) -> dict[str, Any]:
        return {"name": name, "ready": _model(state, name) is not None}

    @router.post(INFER_ROUTE.removeprefix("/v2"), responses={200: {"model": InferResponse}},
                 openapi_extra=openapi_body(InferRequest))
    async def infer(request: Request, name: str = model_name) -> Response:
        started = time.perf_counter()
        loaded = _model(state, name)
        if "inference-header-content-length" in request.headers:
            raise InputError("the binary tensor data extension is not supported; send JSON tensors",
                             field="body")
        body = await read_model(request, InferRequest, state.settings.max_body_bytes, untyped_is_json=True)
        n, columns = _columns(body, loaded, bounds)
        request_id = request.state.request_id
        done = await state.inferences.submit(InferJob(columns, n, body.id or request_id, request_id, started))
        return json_response({
            "model_name": name, "model_version": done.loaded.served.version, "id": body.id or request_id,
            "outputs": [{"name": done.loaded.model.output_name, "datatype": "FP32", "shape": [n, 1],
                         "data": done.probabilities}],
        })

    return router
