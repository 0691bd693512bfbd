"""Open Inference Protocol v2 (REST) over the served model: health, model metadata, readiness, infer.

Standard clients (tritonclient, KServe's) work unchanged, with JSON tensors or the binary tensor
data extension (their default): a body whose first ``Inference-Header-Content-Length`` bytes are
the JSON header and whose rest are the inputs' raw bytes (serving.tensors), and an answer in the
same layout when the request asks for binary outputs. ``infer`` takes the graph's own inputs (raw
request fields plus the computed features), so it never touches the feature store; each answered
row is logged like a domain prediction. The gRPC service (serving.oip_grpc) answers through
:func:`run_infer`, the same checks, batching and log. Errors are ``{"error": ...}``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from mlops.contract import DataContract
from mlops.errors import InputError, NotFoundError
from serving import tensors
from serving.answering import Inference, InferJob
from serving.body import json_response, openapi_body, parse_model, read_bytes, read_model
from serving.errors import OipErrorResponse
from serving.lifecycle import LoadedModel
from serving.schemas import MAX_BATCH, infer_example
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
    # None: the values follow the JSON header as raw bytes (parameters.binary_data_size of them).
    data: Annotated[list[StrictFloat | StrictInt | Annotated[StrictStr, Field(max_length=tensors.MAX_TEXT)]],
                    Field(max_length=MAX_BATCH)] | None = None
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
BINARY_HEADER = "inference-header-content-length"


FP32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max: beyond it a value is inf in the graph


def contract_bounds(contract: DataContract) -> Bounds:
    """The contract's range of each raw input and of each computed feature (non-negative counts, ...)."""
    raw: Bounds = {name: (contract.column(name).min, contract.column(name).max) for name in contract.raw_inputs}
    return {**raw, **contract.feature_bounds}


def _columns(request: InferRequest, loaded: LoadedModel, bounds: Bounds) -> tuple[int, dict[str, list[Any]]]:
    """Check every tensor against the graph and the contract; the rows' count and the columns."""
    types = loaded.model.input_types
    output = loaded.model.output_name
    unknown_outputs = sorted({o.name for o in request.outputs or []} - {output})
    if unknown_outputs:
        raise InputError(f"outputs {unknown_outputs} are not the model's; it has {output!r}", field="outputs")
    given = [t.name for t in request.inputs]
    if len(given) != len(types) or set(given) != types.keys():
        missing, unknown = sorted(set(types) - set(given)), sorted(set(given) - set(types))
        raise InputError(f"inputs must be exactly the model's, once each: missing {missing}, unknown {unknown}",
                         field="inputs")
    missing_data = [t.name for t in request.inputs if t.data is None]
    if missing_data:
        raise InputError(f"inputs {missing_data} carry neither data nor binary_data_size", field="inputs")
    n = len(request.inputs[0].data or ())
    if n == 0 or any(len(t.data or ()) != n for t in request.inputs):
        raise InputError("every input tensor must hold the same, non-zero number of rows", field="inputs")
    columns: dict[str, list[Any]] = {}
    for tensor in request.inputs:
        name, data = tensor.name, tensor.data or []
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


def _with_binary_data(request: InferRequest, raw: memoryview) -> InferRequest:
    """``request`` with each binary input's values read, in order, from the bytes after the header."""
    inputs, offset = [], 0
    for tensor in request.inputs:
        size = (tensor.parameters or {}).get("binary_data_size")
        if size is None:
            inputs.append(tensor)
            continue
        if tensor.data is not None or not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InputError(f"input {tensor.name!r}: binary_data_size must be a byte count, and then no data",
                             field=tensor.name)
        if offset + size > len(raw):
            raise InputError(f"input {tensor.name!r}: binary_data_size {size} runs past the body's end",
                             field=tensor.name)
        inputs.append(tensor.model_copy(update={
            "data": tensors.decode(tensor.name, tensor.datatype, raw[offset:offset + size])}))
        offset += size
    if offset != len(raw):
        raise InputError(f"{len(raw) - offset} bytes after the header belong to no input's binary_data_size",
                         field="body")
    return request.model_copy(update={"inputs": inputs})


async def _read_infer(request: Request, max_bytes: int) -> InferRequest:
    header = request.headers.get(BINARY_HEADER)
    if header is None:
        return await read_model(request, InferRequest, max_bytes, untyped_is_json=True)
    raw = await read_bytes(request, max_bytes)
    if not header.isdigit() or int(header) > len(raw):
        raise InputError(f"Inference-Header-Content-Length must be the JSON header's byte count, at most the "
                         f"body's {len(raw)}; got {header!r}", field=BINARY_HEADER)
    size = int(header)
    return _with_binary_data(parse_model(InferRequest, raw[:size]), memoryview(raw)[size:])


def _binary_output(request: InferRequest) -> bool:
    """Whether the answer's output goes as raw bytes: asked for per output, else for all outputs."""
    if request.outputs:
        return any((o.parameters or {}).get("binary_data") is True for o in request.outputs)
    return (request.parameters or {}).get("binary_data_output") is True


async def run_infer(state: ServiceState, request: InferRequest, name: str, bounds: Bounds, request_id: str,
                    started: float) -> tuple[int, Inference]:
    """Check ``request`` against the served model and the contract, score it in the next batch, log it."""
    loaded = _model(state, name)
    n, columns = _columns(request, loaded, bounds)
    return n, await state.inferences.submit(InferJob(columns, n, request.id or request_id, request_id, started))


def _model(state: ServiceState, name: str) -> LoadedModel:
    if name != state.settings.model_name:
        raise NotFoundError(f"model {name!r} is not served here; this service serves {state.settings.model_name!r}")
    return state.manager.require()


def model_metadata(state: ServiceState, name: str) -> dict[str, Any]:
    """The served model's versions and tensors, as the protocol's metadata answer (404, 503)."""
    loaded = _model(state, name)
    session = loaded.model.session
    return {
        "name": name, "versions": [loaded.served.version], "platform": "onnxruntime_onnx",
        "inputs": [{"name": i.name, "datatype": _DATATYPES.get(i.type, i.type), "shape": [-1, 1]}
                   for i in session.get_inputs()],
        "outputs": [{"name": o.name, "datatype": "FP32", "shape": [-1, 1]} for o in session.get_outputs()],
    }


def build_router(state: ServiceState) -> APIRouter:
    router = APIRouter(prefix="/v2", tags=["Open Inference Protocol v2"], responses=_ERRORS)
    # A default, not an Annotated alias: annotations are strings here and FastAPI reads module globals.
    model_name = Path(max_length=128, examples=[state.settings.model_name])
    bounds = contract_bounds(state.contract)

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
        return model_metadata(state, name)

    @router.get("/models/{name}/ready")
    async def model_ready(name: str = model_name) -> dict[str, Any]:
        return {"name": name, "ready": _model(state, name) is not None}

    @router.post(INFER_ROUTE.removeprefix("/v2"), responses={200: {"model": InferResponse}},
                 openapi_extra=openapi_body(InferRequest, example=infer_example(state.contract, datetime.now(UTC))))
    async def infer(request: Request, name: str = model_name) -> Response:
        started = time.perf_counter()
        _model(state, name)  # 404 or 503 before reading the body
        body = await _read_infer(request, state.settings.max_body_bytes)
        request_id = request.state.request_id
        n, done = await run_infer(state, body, name, bounds, request_id, started)
        output: dict[str, Any] = {"name": done.loaded.model.output_name, "datatype": "FP32", "shape": [n, 1]}
        answer = {"model_name": name, "model_version": done.loaded.served.version, "id": body.id or request_id,
                  "outputs": [output]}
        if not _binary_output(body):
            return json_response({**answer, "outputs": [{**output, "data": done.probabilities}]})
        raw = tensors.encode_fp32(done.probabilities)
        output["parameters"] = {"binary_data_size": len(raw)}
        header = orjson.dumps(answer)
        return Response(content=header + raw, media_type="application/octet-stream",
                        headers={BINARY_HEADER: str(len(header))})

    return router
