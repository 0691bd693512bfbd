"""Tensors as raw little-endian bytes: the Open Inference Protocol's binary tensor data extension
(REST) and the raw contents of its gRPC messages share this one codec.

A numeric tensor is its elements packed back to back; a BYTES tensor is each element as a 4-byte
little-endian length followed by its bytes. Decoding enforces the same limits as a JSON tensor
(at most MAX_BATCH values, strings of at most MAX_TEXT characters), so the two ways in accept
exactly the same requests.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from mlops.errors import InputError
from serving.schemas import MAX_BATCH

MAX_TEXT = 64
NUMERIC_DTYPES = {"FP32": "<f4", "FP64": "<f8", "INT32": "<i4", "INT64": "<i8"}
_LENGTH = struct.Struct("<I")


def decode(name: str, datatype: str, raw: bytes | memoryview) -> list[Any]:
    """The values of input ``name`` held in ``raw``; InputError naming the input when they do not fit."""
    if datatype == "BYTES":
        return _decode_text(name, raw)
    dtype = NUMERIC_DTYPES.get(datatype)
    if dtype is None:
        raise InputError(f"input {name!r}: datatype {datatype!r} is not one of BYTES, "
                         f"{', '.join(NUMERIC_DTYPES)}", field=name)
    size = np.dtype(dtype).itemsize
    if len(raw) % size:
        raise InputError(f"input {name!r}: {len(raw)} bytes is not a whole number of {datatype} values",
                         field=name)
    if len(raw) // size > MAX_BATCH:
        raise InputError(f"input {name!r}: more than {MAX_BATCH} values", field=name)
    values: list[Any] = np.frombuffer(raw, dtype=dtype).tolist()
    return values


def _decode_text(name: str, raw: bytes | memoryview) -> list[Any]:
    view = memoryview(raw)
    values: list[Any] = []
    offset = 0
    while offset < len(view):
        if offset + _LENGTH.size > len(view):
            raise InputError(f"input {name!r}: a BYTES element's 4-byte length is cut short", field=name)
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if offset + length > len(view):
            raise InputError(f"input {name!r}: a BYTES element of {length} bytes runs past the data", field=name)
        values.append(decode_text(name, bytes(view[offset:offset + length])))
        offset += length
        if len(values) > MAX_BATCH:
            raise InputError(f"input {name!r}: more than {MAX_BATCH} values", field=name)
    return values


def decode_text(name: str, element: bytes) -> str:
    """One BYTES element as text (UTF-8, at most MAX_TEXT characters)."""
    try:
        text = element.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"input {name!r}: a BYTES element is not UTF-8 text", field=name) from exc
    if len(text) > MAX_TEXT:
        raise InputError(f"input {name!r}: a BYTES element is longer than {MAX_TEXT} characters", field=name)
    return text


def encode_fp32(values: list[float]) -> bytes:
    """``values`` as an FP32 tensor's raw bytes."""
    return np.asarray(values, dtype="<f4").tobytes()
