"""Export the torch model to one self-contained ONNX graph over raw request fields, and prove parity.

The graph's inputs are the contract's raw fields (numeric float32 [batch, 1], categorical string
[batch, 1]). A small ONNX head maps strings to vocabulary indices (ai.onnx.ml LabelEncoder, unknown
-> 0) and stacks the fields; the torch part (log1p, standardization, MLP) follows. Serving feeds
raw values and never re-implements preprocessing.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import torch
from onnx import TensorProto, compose, helper

from mlops.contract import DataContract
from mlops.errors import ExportParityError
from mlops.inference import OnnxModel
from mlops.model import UNKNOWN_INDEX, TabularMLP, encode

OUTPUT_NAME = "probability"
BATCH_DIM = "batch"
_ML_DOMAIN = "ai.onnx.ml"
_ML_OPSET = 3
NET_PREFIX = "net/"  # keeps the torch graph's internal names clear of contract field names
_NUMERIC = "numeric"
_CATEGORICAL = "categorical"


class _NumericOnly(torch.nn.Module):
    """The model of a contract without categorical inputs, with one graph input: torch.export cannot
    keep a dynamic batch axis on an empty [batch, 0] tensor."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, numeric: torch.Tensor) -> torch.Tensor:
        no_categories = torch.zeros(numeric.shape[0], 0, dtype=torch.int64, device=numeric.device)
        result: torch.Tensor = self.model(numeric, no_categories)
        return result


def _export_torch(model: torch.nn.Module, n_numeric: int, n_categorical: int) -> onnx.ModelProto:
    module: torch.nn.Module = model
    example: tuple[torch.Tensor, ...] = (torch.zeros(2, n_numeric), torch.zeros(2, n_categorical, dtype=torch.int64))
    names = [_NUMERIC, _CATEGORICAL]
    if n_categorical == 0:
        module, example, names = _NumericOnly(model).eval(), example[:1], names[:1]
    batch = torch.export.Dim.DYNAMIC
    with warnings.catch_warnings():
        # torch's own pytree code trips its deprecation shim; nothing here can change that.
        warnings.filterwarnings(
            "ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning
        )
        program = torch.onnx.export(
            module,
            example,
            input_names=names,
            output_names=[OUTPUT_NAME],
            dynamic_shapes=tuple({0: batch} for _ in example),
            dynamo=True,
            verbose=False,
        )
    if program is None:  # only the legacy exporter returns None
        raise RuntimeError("torch.onnx.export returned no program")
    return program.model_proto


def _field_input(name: str, elem_type: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, [BATCH_DIM, 1])


def _preprocessing_head(
    contract: DataContract, vocabs: dict[str, list[str]], opset: int, ir_version: int, ml_opset: int = _ML_OPSET
) -> onnx.ModelProto:
    """Raw per-field inputs -> (numeric [batch, k] float32, categorical [batch, c] int64); without
    categorical inputs only the numeric tensor."""
    numeric = contract.numeric_inputs
    categorical = list(contract.model_inputs.categorical)
    inputs = [_field_input(n, TensorProto.FLOAT) for n in numeric]
    inputs += [_field_input(n, TensorProto.STRING) for n in categorical]
    nodes = [helper.make_node("Concat", numeric, [_NUMERIC], axis=1, name="stack_numeric")]
    encoded = []
    for name in categorical:
        index_name = f"{name}__index"
        nodes.append(helper.make_node(
            "LabelEncoder", [name], [index_name], domain=_ML_DOMAIN, name=f"encode_{name}",
            keys_strings=vocabs[name],
            values_int64s=list(range(UNKNOWN_INDEX + 1, len(vocabs[name]) + 1)),
            default_int64=UNKNOWN_INDEX,
        ))
        encoded.append(index_name)
    outputs = [helper.make_tensor_value_info(_NUMERIC, TensorProto.FLOAT, [BATCH_DIM, len(numeric)])]
    if categorical:
        nodes.append(helper.make_node("Concat", encoded, [_CATEGORICAL], axis=1, name="stack_categorical"))
        outputs.append(helper.make_tensor_value_info(_CATEGORICAL, TensorProto.INT64, [BATCH_DIM, len(categorical)]))
    graph = helper.make_graph(nodes, "preprocessing", inputs, outputs)
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid(_ML_DOMAIN, ml_opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version)


def export_onnx(
    model: TabularMLP,
    contract: DataContract,
    vocabs: dict[str, list[str]],
    path: Path,
    *,
    threshold: float,
    metadata: dict[str, str],
) -> Path:
    """Write the model as one ONNX file taking raw fields; returns the path written."""
    return write_served_graph(torch_scoring_graph(model, contract), contract, vocabs, path, threshold=threshold,
                              metadata=metadata)


def torch_scoring_graph(model: torch.nn.Module, contract: DataContract) -> onnx.ModelProto:
    """The MLP's graph (or any module's answering ``forward(numeric, categorical)``) over the encoded inputs,
    as :func:`write_served_graph` takes it."""
    model = model.to("cpu").eval()
    return _export_torch(model, len(contract.numeric_inputs), len(contract.model_inputs.categorical))


def write_served_graph(
    net: onnx.ModelProto,
    contract: DataContract,
    vocabs: dict[str, list[str]],
    path: Path,
    *,
    threshold: float,
    metadata: dict[str, str],
) -> Path:
    """The preprocessing head and ``net`` as one ONNX file taking raw fields; returns the path written.

    ``net`` takes ``numeric`` (float32 [batch, k]) and, when the contract has categorical inputs,
    ``categorical`` (int64 vocabulary indices [batch, c]) and answers :data:`OUTPUT_NAME` [batch]: any
    model family's scoring graph, so serving sees one kind of file whatever trained it.
    """
    net = compose.add_prefix(net, NET_PREFIX, rename_outputs=False)
    opset = next(o.version for o in net.opset_import if o.domain in ("", "ai.onnx"))
    # A converted tree model may use the ML domain itself; both parts must declare one version of it.
    ml_opset = next((o.version for o in net.opset_import if o.domain == _ML_DOMAIN), _ML_OPSET)
    head = _preprocessing_head(contract, vocabs, opset, net.ir_version, ml_opset)
    io_map = [(_NUMERIC, NET_PREFIX + _NUMERIC)]
    if contract.model_inputs.categorical:
        io_map.append((_CATEGORICAL, NET_PREFIX + _CATEGORICAL))
    merged = compose.merge_models(head, net, io_map=io_map, producer_name="mlops.onnx_export")
    # merge_models concatenates both opset lists; keep one entry per domain.
    opsets = {o.domain: o.version for o in merged.opset_import}
    del merged.opset_import[:]
    merged.opset_import.extend(helper.make_opsetid(d, v) for d, v in opsets.items())
    # The torch exporter names the batch symbol itself; make the output agree with the inputs.
    out_shape = merged.graph.output[0].type.tensor_type.shape
    del out_shape.dim[:]
    out_shape.dim.add().dim_param = BATCH_DIM
    input_names = [i.name for i in merged.graph.input]
    props = {
        **metadata,
        "threshold": repr(float(threshold)),
        "contract": contract.name,
        "input_names": json.dumps(input_names),
    }
    del merged.metadata_props[:]
    helper.set_model_props(merged, props)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(merged, str(path))
    onnx.checker.check_model(str(path), full_check=True)
    return path


def check_parity(
    model: TabularMLP,
    onnx_path: Path,
    frame: pd.DataFrame,
    contract: DataContract,
    vocabs: dict[str, list[str]],
    tolerance: float,
) -> float:
    """Max |torch - onnxruntime| probability over ``frame``; raises ExportParityError above tolerance."""
    numeric, categorical = encode(frame, contract, vocabs)
    expected = model.to("cpu").predict_proba(numeric, categorical)
    actual = OnnxModel(onnx_path).predict_proba(frame)
    if actual.shape != expected.shape:
        raise ExportParityError(f"ONNX output shape {actual.shape} != torch output shape {expected.shape}")
    max_diff = float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64)), initial=0.0))
    if not max_diff <= tolerance:  # also catches NaN
        raise ExportParityError(
            f"ONNX export disagrees with torch: max abs diff {max_diff:.3g} > tolerance {tolerance:.3g} "
            f"over {len(frame)} rows"
        )
    return max_diff
