"""Scoring an exported model with ONNX Runtime: the only model code serving loads.

Never imports torch: the serving image stays small and starts fast. The graph takes raw request
values (one input per field), so this module only shapes a table into the graph's feed.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import onnxruntime as ort

from mlops.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

_ERROR_SEVERITY = 3  # onnxruntime: 0 verbose .. 4 fatal
_STRING_TYPE = "tensor(string)"
_FLOAT_TYPE = "tensor(float)"
# Rows per ONNX Runtime call. A tree ensemble's scratch memory grows faster than its rows: scoring 1.5 M
# rows in one call took 3.3 GB more (450,000 rows: 0.1 GB), so a batch job's rows go a slice at a time.
RUN_ROWS = 131_072

Rows: TypeAlias = "pd.DataFrame | Sequence[Mapping[str, Any]]"


def cuda_available() -> bool:
    """CUDA provider built in *and* a driver present; onnxruntime-gpu lists CUDA even without one."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _providers() -> list[str]:
    # Asking for CUDA on a machine without it makes onnxruntime log native errors at every load.
    return ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda_available() else ["CPUExecutionProvider"]


class OnnxModel:
    """An exported model: raw fields in, probabilities out; threshold from the graph metadata."""

    def __init__(self, path: Path | str) -> None:
        options = ort.SessionOptions()
        options.log_severity_level = _ERROR_SEVERITY
        # A small tabular graph: one thread per call, no spinning (the service runs many calls side
        # by side; spinning threads would steal the cores the other requests need), full fusion.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = Path(path)
        self.session = ort.InferenceSession(str(self.path), sess_options=options, providers=_providers())
        self.metadata: dict[str, str] = dict(self.session.get_modelmeta().custom_metadata_map)
        self.input_types: dict[str, str] = {i.name: i.type for i in self.session.get_inputs()}
        self.input_names: list[str] = list(self.input_types)
        self.output_name: str = self.session.get_outputs()[0].name

    @functools.cached_property  # read per prediction; parsed once
    def threshold(self) -> float:
        return float(self.metadata["threshold"])

    @property
    def providers(self) -> list[str]:
        return list(self.session.get_providers())

    def build_feed(self, rows: Rows) -> dict[str, np.ndarray]:
        """One [N, 1] array per graph input: float32 for numeric fields, str objects for categorical."""
        return self._feed(_columns(rows))

    def _feed(self, columns: Mapping[str, Any]) -> dict[str, np.ndarray]:
        missing = [name for name in self.input_names if name not in columns]
        if missing:
            raise InputError(f"missing model input fields: {missing}", field=missing[0])
        feed: dict[str, np.ndarray] = {}
        for name, kind in self.input_types.items():
            values = columns[name]
            if kind == _STRING_TYPE:
                feed[name] = np.array([str(v) for v in values], dtype=object).reshape(-1, 1)
            elif kind == _FLOAT_TYPE:
                try:
                    feed[name] = np.asarray(values, dtype=np.float32).reshape(-1, 1)
                except (TypeError, ValueError) as exc:
                    raise InputError(f"field {name!r} must be numeric", field=name) from exc
            else:
                raise InputError(f"graph input {name!r} has unsupported type {kind}", field=name)
        return feed

    def predict_proba(self, rows: Rows) -> np.ndarray:
        """The positive class's probability per row, shape [N], float32."""
        return self._run(self.build_feed(rows))

    def predict_columns(self, columns: Mapping[str, Sequence[Any]]) -> np.ndarray:
        """The positive class's probability per row of ``columns`` (input name -> values, equal lengths), shape [N]."""
        return self._run(self._feed(columns))

    def _run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        (probability,) = run_in_slices(self.session, [self.output_name], feed)
        return np.asarray(probability, dtype=np.float32).reshape(-1)


def run_in_slices(session: ort.InferenceSession, outputs: list[str],
                  feed: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """``session.run(outputs, feed)``, a batch job's rows :data:`RUN_ROWS` at a time, each output joined back."""
    rows = max((len(values) for values in feed.values()), default=0)
    if rows <= RUN_ROWS:
        return [np.asarray(output) for output in session.run(outputs, dict(feed))]
    parts = [session.run(outputs, {name: values[start:start + RUN_ROWS] for name, values in feed.items()})
             for start in range(0, rows, RUN_ROWS)]
    return [np.concatenate([np.asarray(part[i]) for part in parts]) for i in range(len(outputs))]


def _columns(rows: Rows) -> Mapping[str, Any]:
    """Column name -> values; rows as dicts are transposed without pandas (the request path)."""
    if not isinstance(rows, Sequence):  # a DataFrame: its columns as arrays
        return {str(name): rows[name].to_numpy() for name in rows.columns}
    names = {name for row in rows for name in row}
    return {name: [row.get(name) for row in rows] for name in names}
