"""Tensor codec: numpy arrays <-> `surreal.v1.Tensor` as {dtype, shape, raw little-endian bytes}.

Never pickled: a peer can only make us allocate arrays of the six supported dtypes, and every
length is checked against dtype x shape before numpy sees the bytes. Decoding wraps the message's
bytes with `np.frombuffer`, so decoded arrays are read-only views (copy one before writing to it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from surreal.protocol.v1 import surreal_pb2 as pb

# Wire dtype -> numpy dtype. Explicitly little-endian so a big-endian peer decodes the same values.
_FROM_WIRE: dict[pb.DType, np.dtype] = {
    pb.FLOAT32: np.dtype("<f4"),
    pb.FLOAT64: np.dtype("<f8"),
    pb.INT32: np.dtype("<i4"),
    pb.INT64: np.dtype("<i8"),
    pb.UINT8: np.dtype("u1"),
    pb.BOOL: np.dtype("?"),
}
# Keyed by (kind, itemsize) so that a native or a byte-swapped dtype finds its wire dtype.
_TO_WIRE: dict[tuple[str, int], pb.DType] = {(d.kind, d.itemsize): w for w, d in _FROM_WIRE.items()}

SUPPORTED_DTYPES: tuple[str, ...] = ("float32", "float64", "int32", "int64", "uint8", "bool")


class CodecError(ValueError):
    """A tensor (or a map of them) cannot be encoded, or a received one is malformed."""


def _wire_dtype(dtype: np.dtype) -> pb.DType:
    wire = _TO_WIRE.get((dtype.kind, dtype.itemsize))
    if wire is None:
        raise CodecError(f"unsupported dtype {dtype}; supported: {', '.join(SUPPORTED_DTYPES)}")
    return wire


@dataclass(frozen=True)
class TensorSpec:
    """What a received tensor must look like."""

    # Element type; anything np.dtype() accepts ("float32", np.int64, ...), one of SUPPORTED_DTYPES.
    dtype: Any
    # Expected shape; None accepts any shape, a None dim accepts any size (e.g. (None, 17)).
    shape: tuple[int | None, ...] | None = None

    def __post_init__(self) -> None:
        dtype = np.dtype(self.dtype)
        try:
            _wire_dtype(dtype)
        except CodecError as e:
            raise ValueError(str(e)) from None
        # Normalized once here so every check compares np.dtype objects.
        object.__setattr__(self, "dtype", dtype)
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(self.shape))

    def check(self, name: str, array: np.ndarray) -> None:
        """Raise CodecError if `array` does not match this spec."""
        if array.dtype.kind != self.dtype.kind or array.dtype.itemsize != self.dtype.itemsize:
            raise CodecError(f"tensor {name!r}: dtype {array.dtype}, expected {self.dtype}")
        if self.shape is None:
            return
        if array.ndim != len(self.shape) or any(
            want is not None and want != got for want, got in zip(self.shape, array.shape, strict=True)
        ):
            raise CodecError(f"tensor {name!r}: shape {array.shape}, expected {self.shape}")


def encode(name: str, array: np.ndarray) -> pb.Tensor:
    """One tensor message; copies the data once (C order, little-endian), so `array` may be
    reused as soon as this returns."""
    array = np.asarray(array)
    wire = _wire_dtype(array.dtype)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    # tobytes() gathers a non-contiguous array in the same single copy.
    return pb.Tensor(name=name, dtype=wire, shape=array.shape, data=array.tobytes(order="C"))


def decode(t: pb.Tensor) -> np.ndarray:
    """The array of one tensor message: a read-only view on its bytes, no copy."""
    dtype = _FROM_WIRE.get(t.dtype)
    if dtype is None:
        raise CodecError(f"tensor {t.name!r}: unknown dtype enum {t.dtype}")
    shape = tuple(t.shape)
    if any(d < 0 for d in shape):
        raise CodecError(f"tensor {t.name!r}: negative dimension in shape {shape}")
    data = t.data  # each access copies out of the message (upb), so read it once
    expected = math.prod(shape) * dtype.itemsize
    if len(data) != expected:
        raise CodecError(f"tensor {t.name!r}: {len(data)} bytes, but {dtype} x {shape} needs {expected}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def encode_map(arrays: Mapping[str, np.ndarray]) -> list[pb.Tensor]:
    """Encode every array of a name -> array mapping."""
    return [encode(name, array) for name, array in arrays.items()]


def decode_map(
    tensors: Iterable[pb.Tensor], schema: Mapping[str, TensorSpec] | None = None
) -> dict[str, np.ndarray]:
    """Decode tensor messages into a name -> array dict.

    With a schema, every name must appear exactly once and match its spec; without one, only
    duplicate names are refused.
    """
    out: dict[str, np.ndarray] = {}
    for t in tensors:
        if t.name in out:
            raise CodecError(f"duplicate tensor {t.name!r}")
        if schema is not None and t.name not in schema:
            raise CodecError(f"unexpected tensor {t.name!r}; expected {sorted(schema)}")
        array = decode(t)
        if schema is not None:
            schema[t.name].check(t.name, array)
        out[t.name] = array
    if schema is not None and len(out) != len(schema):
        missing = sorted(set(schema) - set(out))
        raise CodecError(f"missing tensors {missing}")
    return out
