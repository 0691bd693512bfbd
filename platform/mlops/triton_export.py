"""A Triton model repository for one registered version: ``<dir>/<model>/config.pbtxt`` and
``<dir>/<model>/<version>/model.onnx``, ready for ``tritonserver --model-repository <dir>`` (or a
KServe InferenceService on the Triton runtime).

The config names every graph input and output with its Triton datatype and its dims after the
batch axis, and turns on dynamic batching. It is written as protobuf text format by hand (the
model_config schema ships with tritonclient, which the core does not depend on); the tests parse it
with that schema.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import onnx

from mlops.errors import InputError

# ONNX element type -> Triton data type (model_config.proto's DataType names).
_TRITON_TYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "TYPE_FP32", onnx.TensorProto.DOUBLE: "TYPE_FP64",
    onnx.TensorProto.INT32: "TYPE_INT32", onnx.TensorProto.INT64: "TYPE_INT64",
    onnx.TensorProto.BOOL: "TYPE_BOOL", onnx.TensorProto.STRING: "TYPE_STRING",
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    data_type: str
    dims: list[int]  # after the batch axis; -1 for a variable size


def tensor_specs(values: list[onnx.ValueInfoProto]) -> list[TensorSpec]:
    """Triton's view of graph inputs or outputs: the first axis is the batch."""
    specs = []
    for value in values:
        tensor = value.type.tensor_type
        data_type = _TRITON_TYPES.get(tensor.elem_type)
        if data_type is None:
            raise InputError(f"graph tensor {value.name!r} has an element type Triton's ONNX backend is not "
                             f"mapped for here ({onnx.TensorProto.DataType.Name(tensor.elem_type)})")
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim[1:]]
        specs.append(TensorSpec(value.name, data_type, dims or [1]))
    return specs


def _block(kind: str, specs: list[TensorSpec]) -> str:
    entries = ",\n".join(f'  {{ name: "{s.name}" data_type: {s.data_type} dims: [ {", ".join(map(str, s.dims))} ] }}'
                         for s in specs)
    return f"{kind} [\n{entries}\n]\n"


def model_config(name: str, graph: onnx.ModelProto, *, max_batch_size: int, queue_delay_us: int) -> str:
    """config.pbtxt for ``graph`` served as ``name`` on the ONNX Runtime backend."""
    graph_inputs = {i.name for i in graph.graph.initializer}
    inputs = [i for i in graph.graph.input if i.name not in graph_inputs]
    return (f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {max_batch_size}\n'
            + _block("input", tensor_specs(inputs)) + _block("output", tensor_specs(list(graph.graph.output)))
            + f"dynamic_batching {{ max_queue_delay_microseconds: {queue_delay_us} }}\n"
            + "instance_group [ { kind: KIND_AUTO } ]\n")


def write_repository(onnx_path: Path, directory: Path, name: str, version: str, *, max_batch_size: int = 256,
                     queue_delay_us: int = 2000) -> Path:
    """Write (or replace) ``name``'s version ``version`` in the repository at ``directory``; its folder."""
    if not version.isdigit() or int(version) < 1:
        raise InputError(f"a Triton model version is a positive integer, got {version!r}", field="version")
    graph = onnx.load(str(onnx_path), load_external_data=False)
    config = model_config(name, graph, max_batch_size=max_batch_size, queue_delay_us=queue_delay_us)
    model_dir = directory / name
    version_dir = model_dir / version
    version_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(onnx_path, version_dir / "model.onnx")
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir
