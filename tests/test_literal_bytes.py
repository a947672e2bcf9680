"""Literals kept as element bytes (ir/packing.py, ir/literal.py): every NumPy-free path gives
what the NumPy path gives (bytes, values, proto fields, HLO text), and where it cannot be
sure it hands over to NumPy instead of guessing."""

from __future__ import annotations

import math
import struct

import ml_dtypes
import numpy as np
import pytest

from hloc.frontend.gen import xla_data_pb2
from hloc.frontend.literal_proto import literal_from_proto, literal_to_proto
from hloc.frontend.shape_proto import shape_to_proto
from hloc.ir import Layout, Literal, PrimitiveType, Shape, packing
from hloc.ir.text import literal_text
from hloc.passes.rewrite import scalar_literal

P = PrimitiveType
RNG = np.random.default_rng(20261128)
FLOATS = {P.F16: np.float16, P.F32: np.float32, P.F64: np.float64}
INTS = {P.S8: np.int8, P.S16: np.int16, P.S32: np.int32, P.S64: np.int64,
        P.U8: np.uint8, P.U16: np.uint16, P.U32: np.uint32, P.U64: np.uint64}


def random_bits(dtype, count: int) -> np.ndarray:
    """Every kind of value of a float type: random bit patterns (NaNs with payloads,
    subnormals, infinities) plus the edge values."""
    dtype = np.dtype(dtype)
    uint = np.dtype(f"uint{dtype.itemsize * 8}")
    raw = RNG.integers(0, np.iinfo(uint).max, size=count, dtype=uint, endpoint=True)
    fi = np.finfo(dtype)
    with np.errstate(over="ignore"):  # 16777217 is beyond f16's range: inf
        edges = np.array([0.0, -0.0, np.inf, -np.inf, fi.max, -fi.max, fi.tiny,
                          fi.smallest_subnormal, 0.1, 1 / 3, 16777217.0]).astype(dtype)
    return np.concatenate([raw.view(dtype), edges])


@pytest.mark.parametrize("ptype", list(FLOATS))
def test_pack_matches_numpy_for_floats(ptype):
    np_type = FLOATS[ptype]
    values = [float(v) for v in np.concatenate([
        RNG.standard_normal(500) * 10.0 ** RNG.integers(-45, 45, 500),
        [0.0, -0.0, math.inf, -math.inf, 65504.0, 65520.0, 3.4028235e38, 1e-46, 5e-324]])]
    values += [0, 1, -7, 2 ** 53, True, False]
    for v in values:
        with np.errstate(all="ignore"):
            want = np.array(v).astype(np_type).tobytes()
        got = packing.pack((v,), ptype)
        assert got is None or got == want, (ptype, v)
        if got is None:  # only overflow may be left to NumPy here
            assert math.isinf(np.frombuffer(want, np_type)[0]) and not math.isinf(v), (ptype, v)
    # The default NaN converts alike everywhere; a NaN's payload is NumPy's to convert.
    assert packing.pack((math.nan,), ptype) == np.array(math.nan).astype(np_type).tobytes()
    payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    assert packing.pack((payload,), ptype) is None
    assert packing.pack((2 ** 60 + 1,), ptype) is None  # rounded once by NumPy, twice here
    assert packing.pack((np_type(1.5),), ptype) is None  # not a Python value


@pytest.mark.parametrize("ptype", list(INTS))
def test_pack_matches_numpy_for_integers(ptype):
    info = np.iinfo(INTS[ptype])
    for v in (0, 1, -1, info.min, info.max, info.max + 1, info.min - 1, True, 2.5, 7.0):
        got = packing.pack((v,), ptype)
        if isinstance(v, float) or not info.min <= v <= info.max:
            assert got is None, (ptype, v)  # NumPy truncates, wraps or refuses: its call
        else:
            assert got == np.array(v, dtype=INTS[ptype]).tobytes(), (ptype, v)
    assert packing.pack((True, 0.0, 2.0, math.inf), P.PRED) == np.array(
        [True, 0.0, 2.0, math.inf], dtype=bool).tobytes()
    assert packing.pack((1.0,), P.BF16) is None and packing.pack((1.0,), P.C64) is None


def _proto(ptype, array: np.ndarray, dims, layout=None) -> xla_data_pb2.LiteralProto:
    """A LiteralProto written by the NumPy path (the layout's physical order)."""
    shape = Shape.array(ptype, dims) if layout is None else Shape.array(ptype, dims, layout)
    return literal_to_proto(Literal(shape, array))


@pytest.mark.parametrize("ptype", [P.F16, P.F32, P.F64, P.BF16, P.S4, P.PRED, *INTS])
def test_proto_round_trip_keeps_bytes_and_matches_numpy(ptype):
    from hloc.ir import dtypes

    np_type = dtypes.to_numpy(ptype)
    if ptype in FLOATS:
        array = random_bits(np_type, 60)[:60]
    elif ptype == P.PRED:
        array = RNG.integers(0, 2, 60).astype(bool)
    else:
        raw = RNG.integers(0, 256, size=60 * np.dtype(np_type).itemsize, dtype=np.uint8)
        array = raw.view(np_type) if ptype != P.S4 else (raw % 16).astype(np.int8) - 8
        array = np.asarray(array).astype(np_type)
    array = array.reshape(3, 4, 5)
    pb = _proto(ptype, array, (3, 4, 5))
    literal = literal_from_proto(pb)
    repeated_nan = ptype in (P.F32, P.F64) and np.isnan(array.astype(np.float64)).any()
    assert literal.kept_as_bytes is not repeated_nan  # a NaN in f32s/f64s goes NumPy's way
    assert literal.data == np.ascontiguousarray(array).tobytes()
    assert literal.array.dtype == np_type and literal.array.shape == (3, 4, 5)
    assert not literal.array.flags.writeable
    assert literal == Literal(literal.shape, array) and hash(literal) == hash(
        Literal(literal.shape, array))
    again = literal_to_proto(literal)
    assert again.SerializeToString(deterministic=True) == pb.SerializeToString(deterministic=True)
    values = literal.python_values()
    f16_nan = ptype == P.F16 and np.isnan(array).any()  # struct would drop the payload
    if literal.kept_as_bytes and ptype in packing.FORMATS and not f16_nan:
        assert np.array(values, dtype=np_type).tobytes() == array.tobytes()
        assert [type(v) for v in values] == [type(v) for v in array.reshape(-1).tolist()]
    else:
        assert values is None


def test_column_major_and_large_literals_take_numpy():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    pb = _proto(P.F32, array, (3, 4), Layout((0, 1)))
    literal = literal_from_proto(pb)
    assert not literal.kept_as_bytes and literal.array.tolist() == array.tolist()
    big = np.arange(5000, dtype=np.int32)
    assert not literal_from_proto(_proto(P.S32, big, (5000,))).kept_as_bytes
    wrong = xla_data_pb2.LiteralProto()
    shape_to_proto(Shape.array(P.F32, (3,)), wrong.shape)
    wrong.f32s.extend([1.0, 2.0])
    with pytest.raises(Exception, match="2 values in f32s, expected 3"):
        literal_from_proto(wrong)


@pytest.mark.parametrize("ptype", [P.F16, P.F32, P.F64])
def test_printing_bytes_matches_numpy_printing(ptype):
    array = random_bits(FLOATS[ptype], 3000)
    numbers = array[~np.isnan(array)]
    for values in (array, numbers):
        kept = Literal(Shape.array(ptype, values.shape), data=values.tobytes())
        texts = literal_text._format_python(kept)
        if ptype == P.F16 and values is array:
            assert texts is None  # f16 NaNs: NumPy's path
        else:
            assert texts == literal_text.format_elements(values, ptype)
        assert literal_text.format_literal(kept) == literal_text.format_literal(
            Literal(kept.shape, values))


def test_printing_integers_and_preds_from_bytes():
    for ptype, values in ((P.S32, [0, -5, 2 ** 31 - 1]), (P.U64, [2 ** 64 - 1, 3, 0]),
                          (P.PRED, [True, False, True])):
        array = np.array(values, dtype=Literal.scalar(values[0], ptype).array.dtype)
        kept = Literal(Shape.array(ptype, (3,)), data=array.tobytes())
        assert literal_text.format_literal(kept) == literal_text.format_literal(
            Literal(kept.shape, array))
    scalar = Literal.scalar(False, P.PRED)
    assert scalar.kept_as_bytes and literal_text.format_literal(scalar) == "false"


def test_scalar_literal_converts_as_astype():
    """The rewrites' constants: NumPy's astype (wrap-around included) with or without it."""
    cases = [(300, P.S8), (-1, P.U32), (2.75, P.S32), (0.1, P.F32), (1e300, P.F32),
             (-0.0, P.F16), (True, P.F64), (7, P.BF16), (math.nan, P.F32), (5, P.PRED)]
    for value, ptype in cases:
        with np.errstate(all="ignore"):
            want = np.asarray(value).astype(Shape.scalar(ptype).np_dtype)
            got = scalar_literal(value, ptype)
        assert got.data == want.tobytes(), (value, ptype)
    assert scalar_literal(0.5, P.F32).kept_as_bytes
    assert not scalar_literal(7, P.BF16).kept_as_bytes
    assert struct.unpack("<f", scalar_literal(0.1, P.F32).data)[0] == float(np.float32(0.1))
    assert Literal.scalar(1.0, P.BF16).array.dtype == ml_dtypes.bfloat16


def test_splat_bytes():
    assert Literal.from_array(np.full((2, 3), -0.0, np.float32)).splat_bytes() == struct.pack(
        "<f", -0.0)
    assert Literal.from_array(np.array([0.0, -0.0], np.float32)).splat_bytes() is None
    assert Literal.from_array(np.zeros((0,), np.float32)).splat_bytes() is None
    assert Literal.tuple_of([Literal.scalar(1, P.S32)]).splat_bytes() is None
