"""Tensor codec: exact wire bytes, round trips, zero-copy decode, and every rejection."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from surreal.protocol.codec import (
    SUPPORTED_DTYPES,
    CodecError,
    TensorSpec,
    decode,
    decode_map,
    encode,
    encode_map,
)
from surreal.protocol.v1 import surreal_pb2 as pb

SHAPES = [(), (0,), (5,), (2, 0, 3), (2, 3, 4)]


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.startswith("float"):
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def _root_base(array: np.ndarray) -> object:
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    return base


def test_wire_bytes_are_little_endian_c_order() -> None:
    t = encode("x", np.array([[1, 2], [3, 258]], dtype=np.int32))
    assert t.name == "x" and t.dtype == pb.INT32 and list(t.shape) == [2, 2]
    assert t.data == bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 2, 1, 0, 0])
    assert encode("b", np.array([True, False])).data == b"\x01\x00"
    assert encode("s", np.float64(1.0)).data == b"\x00\x00\x00\x00\x00\x00\xf0\x3f"


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip_every_dtype_and_shape(dtype: str, shape: tuple[int, ...]) -> None:
    array = _values(dtype, shape)
    wire = pb.Tensor.FromString(encode("t", array).SerializeToString())
    out = decode(wire)
    assert out.dtype == np.dtype(dtype)
    assert out.shape == shape
    np.testing.assert_array_equal(out, array)


def test_decode_is_a_read_only_view_without_copy() -> None:
    out = decode(encode("t", np.arange(12, dtype=np.float32).reshape(3, 4)))
    assert not out.flags.writeable
    assert isinstance(_root_base(out), bytes)  # frombuffer + reshape: views all the way down


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::2],  # strided
        lambda a: a.T,  # Fortran order
        lambda a: a[::-1],  # negative stride
        lambda a: a.astype(">f4"),  # big-endian
    ],
    ids=["strided", "transposed", "reversed", "big-endian"],
)
def test_non_contiguous_and_byte_swapped_input(make) -> None:
    array = make(np.arange(24, dtype=np.float32).reshape(4, 6))
    out = decode(encode("t", array))
    np.testing.assert_array_equal(out, array)
    assert out.dtype == np.dtype("<f4")


def test_encode_copies_so_the_caller_may_reuse_its_buffer() -> None:
    array = np.zeros(3, dtype=np.float32)
    t = encode("t", array)
    array[:] = 7
    np.testing.assert_array_equal(decode(t), [0, 0, 0])


@pytest.mark.parametrize("dtype", ["float16", "complex64", "uint16", "object", "U3"])
def test_encode_rejects_unsupported_dtypes(dtype: str) -> None:
    with pytest.raises(CodecError, match="unsupported dtype"):
        encode("t", np.zeros(2, dtype=dtype))


@pytest.mark.parametrize(
    ("dtype", "shape", "data", "match"),
    [
        (pb.FLOAT32, [2], b"\x00" * 7, "7 bytes"),  # one byte short
        (pb.FLOAT32, [2], b"\x00" * 9, "9 bytes"),  # one byte too many
        (pb.INT64, [2, 3], b"\x00" * 40, "40 bytes"),  # shape says 48
        (pb.UINT8, [], b"", "0 bytes"),  # a scalar needs one element
        (pb.FLOAT32, [-1, 2], b"\x00" * 8, "negative"),
        (99, [1], b"\x00", "unknown dtype"),
        (pb.DTYPE_UNSPECIFIED, [1], b"\x00", "unknown dtype"),
    ],
)
def test_decode_rejects_malformed(dtype: int, shape: list[int], data: bytes, match: str) -> None:
    t = pb.Tensor(name="t", dtype=dtype, shape=shape, data=data)
    with pytest.raises(CodecError, match=match):
        decode(t)


def test_codec_error_is_a_value_error() -> None:
    assert issubclass(CodecError, ValueError)


SCHEMA = {"obs": TensorSpec("float32", (None, 3)), "done": TensorSpec(np.bool_)}


def test_decode_map_with_schema_accepts_matching_tensors() -> None:
    arrays = {"obs": np.ones((5, 3), np.float32), "done": np.zeros((2, 2, 2), bool)}
    out = decode_map(encode_map(arrays), SCHEMA)
    assert set(out) == {"obs", "done"}
    np.testing.assert_array_equal(out["obs"], arrays["obs"])
    assert out["done"].shape == (2, 2, 2)  # no shape in its spec: any shape


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ({"obs": np.ones((5, 3), np.float32)}, "missing tensors \\['done'\\]"),
        (
            {"obs": np.ones((5, 3), np.float32), "done": np.zeros(1, bool), "x": np.zeros(1)},
            "unexpected tensor 'x'",
        ),
        ({"obs": np.ones((5, 3), np.float64), "done": np.zeros(1, bool)}, "dtype float64"),
        ({"obs": np.ones((5, 3), np.int32), "done": np.zeros(1, bool)}, "dtype int32"),
        ({"obs": np.ones((5, 4), np.float32), "done": np.zeros(1, bool)}, "shape \\(5, 4\\)"),
        ({"obs": np.ones(15, np.float32), "done": np.zeros(1, bool)}, "shape \\(15,\\)"),
    ],
    ids=["missing", "unexpected", "float64-for-float32", "int-for-float", "fixed-dim", "rank"],
)
def test_decode_map_with_schema_rejects(arrays: dict[str, np.ndarray], match: str) -> None:
    with pytest.raises(CodecError, match=match):
        decode_map(encode_map(arrays), SCHEMA)


def test_decode_map_rejects_duplicate_names_even_without_schema() -> None:
    tensors = [encode("a", np.zeros(1)), encode("a", np.ones(1))]
    with pytest.raises(CodecError, match="duplicate"):
        decode_map(tensors)


def test_tensor_spec_refuses_unsupported_dtype() -> None:
    with pytest.raises(ValueError, match="unsupported dtype"):
        TensorSpec("float16")
    assert TensorSpec("float32", [None, 2]).shape == (None, 2)


def test_no_pickle_anywhere_in_the_protocol_package() -> None:
    root = Path(__file__).resolve().parents[2] / "protocol"
    sources = [p for p in root.rglob("*.py") if "_pb2" not in p.name]
    assert sources
    forbidden = re.compile(r"import (cloud)?pickle|from (cloud)?pickle|allow_pickle|\bdill\b")
    for path in sources:
        assert not forbidden.search(path.read_text()), path
