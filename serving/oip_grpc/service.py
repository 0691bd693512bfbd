"""The Open Inference Protocol's gRPC service (GRPCInferenceService) on its own port, in the same
process and event loop as the REST routes.

ModelInfer turns the message into the REST route's request model and answers through
serving.oip.run_infer: the same checks against the graph and the contract, the same batches and
the same prediction log as /v2/models/<name>/infer. Inputs come as raw contents (what
tritonclient.grpc sends by default) or typed contents; the output goes back as raw contents.
A platform error keeps its meaning as a gRPC status (derived from its HTTP status).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from pydantic import ValidationError

from mlops.errors import ConfigError, InputError, MLOpsError, NotFoundError
from serving import oip, tensors
from serving.oip_grpc import inference_pb2 as pb
from serving.state import ServiceState

SERVICE = "inference.GRPCInferenceService"
_STATUS = {401: grpc.StatusCode.UNAUTHENTICATED, 404: grpc.StatusCode.NOT_FOUND,
           409: grpc.StatusCode.FAILED_PRECONDITION, 413: grpc.StatusCode.RESOURCE_EXHAUSTED,
           503: grpc.StatusCode.UNAVAILABLE}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TYPED = {"FP32": "fp32_contents", "FP64": "fp64_contents", "INT32": "int_contents", "INT64": "int64_contents"}


def status_of(exc: MLOpsError) -> grpc.StatusCode:
    if 400 <= exc.http_status < 500:
        return _STATUS.get(exc.http_status, grpc.StatusCode.INVALID_ARGUMENT)
    return _STATUS.get(exc.http_status, grpc.StatusCode.INTERNAL)


def _values(tensor: Any, raw: bytes | None) -> list[Any]:
    if raw is not None:
        return tensors.decode(tensor.name, tensor.datatype, raw)
    if tensor.datatype == "BYTES":
        return [tensors.decode_text(tensor.name, element) for element in tensor.contents.bytes_contents]
    field = _TYPED.get(tensor.datatype)
    if field is None:
        raise InputError(f"input {tensor.name!r}: datatype {tensor.datatype!r} is not one of BYTES, "
                         f"{', '.join(_TYPED)}", field=tensor.name)
    return list(getattr(tensor.contents, field))


def infer_request(message: pb.ModelInferRequest) -> oip.InferRequest:
    """The message as the REST route's request model; InputError naming what does not fit."""
    raw = list(message.raw_input_contents)
    if raw and len(raw) != len(message.inputs):
        raise InputError(f"{len(raw)} raw_input_contents for {len(message.inputs)} inputs", field="inputs")
    inputs = [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape),
               "data": _values(t, raw[index] if raw else None)} for index, t in enumerate(message.inputs)]
    try:
        return oip.InferRequest.model_validate({
            "id": message.id or None, "inputs": inputs,
            "outputs": [{"name": o.name} for o in message.outputs] or None})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError(f"{where}: {first['msg']}", field=where) from exc


class InferenceService:
    """The RPCs over one process's ServiceState."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state
        self.bounds = oip.contract_bounds(state.contract)

    def handler(self) -> grpc.GenericRpcHandler:
        rpcs: dict[str, tuple[Callable[..., Awaitable[Any]], Any]] = {
            "ServerLive": (self.server_live, pb.ServerLiveRequest),
            "ServerReady": (self.server_ready, pb.ServerReadyRequest),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest),
            "ModelInfer": (self.model_infer, pb.ModelInferRequest),
        }
        return grpc.method_handlers_generic_handler(SERVICE, {
            name: grpc.unary_unary_rpc_method_handler(
                self._answering(name, method), request_deserializer=request_type.FromString,
                response_serializer=lambda message: message.SerializeToString())
            for name, (method, request_type) in rpcs.items()})

    def _answering(self, name: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """``method`` with its platform errors as gRPC statuses, counted like the REST routes."""
        counted = f"grpc:{name}"

        async def answer(message: Any, context: grpc.aio.ServicerContext) -> Any:
            started, code = time.perf_counter(), grpc.StatusCode.OK
            try:
                return await method(message, context)
            except MLOpsError as exc:
                code = status_of(exc)
                await context.abort(code, exc.message)
            except Exception:
                code = grpc.StatusCode.INTERNAL
                raise
            finally:
                self.state.metrics.answered(counted, code.name, time.perf_counter() - started)

        return answer

    async def server_live(self, _: pb.ServerLiveRequest, __: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, _: pb.ServerReadyRequest, __: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self.state.manager.current is not None)

    async def model_ready(self, message: pb.ModelReadyRequest, _: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=message.name == self.state.settings.model_name
                                     and self.state.manager.current is not None)

    async def model_metadata(self, message: pb.ModelMetadataRequest, _: grpc.aio.ServicerContext
                             ) -> pb.ModelMetadataResponse:
        return pb.ModelMetadataResponse(**oip.model_metadata(self.state, message.name))

    async def model_infer(self, message: pb.ModelInferRequest, context: grpc.aio.ServicerContext
                          ) -> pb.ModelInferResponse:
        started = time.perf_counter()
        served = self.state.manager.require()
        if message.model_version and message.model_version != served.served.version:
            raise NotFoundError(f"version {message.model_version!r} is not served; this service serves "
                                f"{served.served.version!r}")
        given = dict(context.invocation_metadata() or ()).get("x-request-id", "")
        request_id = given if isinstance(given, str) and _REQUEST_ID.match(given) else uuid.uuid4().hex
        request = infer_request(message)
        n, done = await oip.run_infer(self.state, request, message.model_name, self.bounds, request_id, started)
        response = pb.ModelInferResponse(model_name=message.model_name, model_version=done.loaded.served.version,
                                         id=request.id or request_id)
        response.outputs.add(name=done.loaded.model.output_name, datatype="FP32", shape=[n, 1])
        response.raw_output_contents.append(tensors.encode_fp32(done.probabilities))
        return response


async def start_server(state: ServiceState) -> grpc.aio.Server:
    """The gRPC server on ``settings.host:settings.grpc_port``, started; ConfigError when the port is taken."""
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", state.settings.max_body_bytes)])
    server.add_generic_rpc_handlers((InferenceService(state).handler(),))
    address = f"{state.settings.host}:{state.settings.grpc_port}"
    try:
        server.add_insecure_port(address)
    except RuntimeError as exc:
        raise ConfigError(f"cannot listen for gRPC on {address}: {exc}") from exc
    await server.start()
    return server
