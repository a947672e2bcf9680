"""Elementwise opcodes of the reference interpreter against explicit formulas of XLA's semantics.

Every opcode is also checked against XLA itself by tests/test_interp_samples.py (the samples'
expected outputs); `test_opcodes_have_xla_samples` keeps that coverage from silently shrinking.
Here each case computes its expected value independently (Python integers, the math module,
bit formulas) from the documented semantics, plus a table of XLA CPU behaviours measured with
jaxlib 0.10.2 (denormal handling) that the samples do not pin down.
"""

from __future__ import annotations

import json
import math
import struct
import warnings

import ml_dtypes
import numpy as np
import pytest

from hloc.errors import UnsupportedError
from hloc.ir import Attrs, Computation, Module, Opcode, Shape, dtypes
from hloc.runtime.interpreter import evaluate
from tests.conftest import SAMPLES

pytestmark = pytest.mark.pure

BF16, E4M3 = np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn)
S4, U4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
INF, NAN = math.inf, math.nan


def _shape(dt, dims) -> Shape:
    return Shape.array(dtypes.from_numpy(np.dtype(dt)), dims)


def run(opcode: str, *args, dtype=None, dims=None, called=(), helpers=(), **attrs) -> np.ndarray:
    """Evaluate one `opcode` instruction on parameter arrays `args`.

    `called` are the instruction's computations, `helpers` computations they call.
    """
    arrays = [np.asarray(a) for a in args]
    module = Module("t")
    for comp in [*helpers, *called]:
        module.add_computation(comp)
    comp = Computation("main")
    params = [comp.create(Opcode.PARAMETER, _shape(a.dtype, a.shape),
                          attrs=Attrs(parameter_number=i)) for i, a in enumerate(arrays)]
    out_dims = dims if dims is not None else np.broadcast_shapes(*[a.shape for a in arrays])
    comp.root = comp.create(Opcode(opcode), _shape(dtype or arrays[0].dtype, out_dims), params,
                            called=list(called), attrs=Attrs(**attrs))
    module.add_computation(comp, entry=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy warnings must never leak
        return np.asarray(evaluate(module, arrays).array)


def bits(x: np.ndarray) -> np.ndarray:
    return x.view(f"u{x.dtype.itemsize}")


def assert_same_floats(got, expected):
    got, expected = np.asarray(got), np.asarray(expected, dtype=got.dtype)
    assert np.array_equal(np.isnan(got.astype(np.float64)), np.isnan(expected.astype(np.float64)))
    keep = ~np.isnan(got.astype(np.float64))
    assert bits(got)[keep].tolist() == bits(expected)[keep].tolist(), (got, expected)


# ---- coverage by XLA's own outputs -------------------------------------------------------------

MINE = {
    "abs", "add", "and", "atan2", "bitcast-convert", "cbrt", "ceil", "clamp", "compare",
    "complex", "convert", "cosine", "count-leading-zeros", "divide", "erf", "exponential",
    "exponential-minus-one", "floor", "imag", "is-finite", "log", "log-plus-one", "maximum",
    "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "real",
    "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt",
    "select", "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine",
    "sqrt", "subtract", "tan", "tanh", "xor", "rng-bit-generator",
}


def test_opcodes_have_xla_samples():
    metas = [json.loads(p.read_text()) for p in list(SAMPLES.glob("*.json"))
             + list(SAMPLES.glob("ops/*.json"))]
    seen = {op for m in metas for op in list(m.get("opcodes", {})) + list(m.get("opt_opcodes", {}))}
    if not seen:
        pytest.skip("no samples generated")
    assert sorted(MINE - seen) == []


# ---- integers: Python big-integer formulas ---------------------------------------------------

INT_TYPES = [np.dtype(t) for t in (np.int8, np.int32, np.int64, np.uint8, np.uint64)] + [S4, U4]


def _info(dt):
    d = dtypes.info(dtypes.from_numpy(dt))
    return d.bits, d.is_signed_int


def _wrap(v: int, dt) -> int:
    width, signed = _info(dt)
    v &= (1 << width) - 1
    return v - (1 << width) if signed and v >> (width - 1) else v


def _int_samples(dt, n=40, seed=0):
    width, signed = _info(dt)
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    rng = np.random.default_rng(seed)
    edge = [0, 1, 2, 3, lo, hi, lo + 1, hi - 1] + ([-1, -2] if signed else [])
    vals = edge + [lo + int(v) % (hi - lo + 1) for v in rng.integers(0, 2 ** 62, n - len(edge))]
    return np.array(vals, dtype=object).astype(np.int64 if signed else np.uint64).astype(dt)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _xla_div(a, b, dt):
    width, signed = _info(dt)
    if b == 0:
        return -1  # all ones
    if signed and a == -(1 << (width - 1)) and b == -1:
        return a
    return _trunc_div(a, b)


def _xla_rem(a, b, dt):
    width, signed = _info(dt)
    if b == 0:
        return a
    if signed and a == -(1 << (width - 1)) and b == -1:
        return 0
    return a - b * _trunc_div(a, b)


def _xla_pow(base, e, dt):
    width, signed = _info(dt)
    # The exponent's storage sign bit: u4 sits zero-extended in a byte, so it is never set.
    negative = e < 0 if signed else (width >= 8 and e >> (width - 1))
    if negative:
        if base == 1:
            return 1
        if _wrap(base, dt) == _wrap(-1, dt):
            return base if e % 2 else 1
        return 0
    return pow(base, e & 63, 1 << width)  # square-and-multiply over 6 exponent bits


def _shift(kind, a, s, dt):
    width, signed = _info(dt)
    amount = s % (1 << width)  # amounts are read as unsigned
    as_signed = _wrap(a, np.dtype(f"int{max(8, width)}")) if width >= 8 else \
        (a % 16) - 16 * ((a % 16) >= 8)  # the bit pattern read as two's complement
    if amount >= width:
        return -1 if kind == "shift-right-arithmetic" and as_signed < 0 else 0
    if kind == "shift-left":
        return a << amount
    if kind == "shift-right-logical":
        return (a % (1 << width)) >> amount
    return as_signed >> amount  # the sign bit fills in, for unsigned types too


BINARY_INT = {
    "add": lambda a, b, dt: a + b, "subtract": lambda a, b, dt: a - b,
    "multiply": lambda a, b, dt: a * b, "divide": _xla_div, "remainder": _xla_rem,
    "maximum": lambda a, b, dt: max(a, b), "minimum": lambda a, b, dt: min(a, b),
    "and": lambda a, b, dt: a & b, "or": lambda a, b, dt: a | b, "xor": lambda a, b, dt: a ^ b,
    "power": _xla_pow,
    **{k: (lambda a, b, dt, k=k: _shift(k, a, b, dt))
       for k in ("shift-left", "shift-right-logical", "shift-right-arithmetic")},
}


@pytest.mark.parametrize("dt", INT_TYPES, ids=str)
@pytest.mark.parametrize("op", sorted(BINARY_INT))
def test_integer_binary(op, dt):
    a = _int_samples(dt)
    b = _int_samples(dt, seed=1)[::-1].copy()
    if op == "power":
        b = (np.arange(a.size) % 70 - (3 if _info(dt)[1] else 0)).astype(np.int64).astype(dt)
    if op.startswith("shift"):
        b = np.array([0, 1, _info(dt)[0] - 1, _info(dt)[0], _info(dt)[0] + 3] * 8,
                     dtype=np.int64).astype(dt)
    got = run(op, a, b)
    expected = [_wrap(BINARY_INT[op](int(x), int(y), dt), dt) for x, y in zip(a, b, strict=True)]
    assert [int(v) for v in got] == expected


UNARY_INT = {
    "negate": lambda a, dt: -a,
    "abs": lambda a, dt: abs(a),
    "sign": lambda a, dt: (a > 0) - (a < 0),
    "not": lambda a, dt: ~a,
    "popcnt": lambda a, dt: bin(a % (1 << _info(dt)[0])).count("1"),
    "count-leading-zeros": lambda a, dt: _info(dt)[0] - (a % (1 << _info(dt)[0])).bit_length(),
}


@pytest.mark.parametrize("dt", INT_TYPES, ids=str)
@pytest.mark.parametrize("op", sorted(UNARY_INT))
def test_integer_unary(op, dt):
    a = _int_samples(dt)
    expected = [_wrap(UNARY_INT[op](int(x), dt), dt) for x in a]
    assert [int(v) for v in run(op, a)] == expected


def test_pred_logic():
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    assert run("and", a, b).tolist() == [False, False, False, True]
    assert run("or", a, b).tolist() == [False, True, True, True]
    assert run("xor", a, b).tolist() == [False, True, True, False]
    assert run("not", a).tolist() == [True, True, False, False]
    assert run("add", a, b).tolist() == run("or", a, b).tolist()
    assert run("multiply", a, b).tolist() == run("and", a, b).tolist()


# ---- floats: IEEE formulas --------------------------------------------------------------------

def test_maximum_minimum_nan_and_signed_zero():
    x = np.array([-0.0, 0.0, NAN, 1.0, 3.0, -INF], np.float32)
    y = np.array([0.0, -0.0, 1.0, NAN, 2.0, INF], np.float32)
    assert_same_floats(run("maximum", x, y), [0.0, 0.0, NAN, NAN, 3.0, INF])
    assert_same_floats(run("minimum", x, y), [-0.0, -0.0, NAN, NAN, 2.0, -INF])


def test_maximum_minimum_nan_bits_follow_xla_cpu():
    # Measured on XLA CPU: a NaN first operand comes back as is; a NaN second operand gets
    # the sign AND (maximum) / OR (minimum) of both operands' signs.
    x = np.array([0x3F000000, 0xBF000000, 0xBF000000, 0xFFC00001], np.uint32).view(np.float32)
    y = np.array([0xFFC00000, 0x7FC00000, 0xFFC00000, 0x7FC00000], np.uint32).view(np.float32)
    assert bits(run("maximum", x, y)).tolist() == [0x7FC00000, 0x7FC00000, 0xFFC00000, 0xFFC00001]
    assert bits(run("minimum", x, y)).tolist() == [0xFFC00000, 0xFFC00000, 0xFFC00000, 0xFFC00001]


def test_clamp_broadcasts_scalar_bounds_and_propagates_nan():
    x = np.array([-5.0, 0.5, 7.0, NAN, -0.0], np.float32)
    got = run("clamp", np.float32(-1.0), x, np.float32(2.0), dims=x.shape)
    assert_same_floats(got, [-1.0, 0.5, 2.0, NAN, -0.0])
    xi = np.array([-300, 5, 300], np.int32)
    assert run("clamp", np.int32(-10), xi, np.int32(10), dims=xi.shape).tolist() == [-10, 5, 10]


def test_sign_keeps_nan_and_signed_zero():
    x = np.array([-0.0, 0.0, NAN, -3.5, 2.0, -INF, INF], np.float32)
    assert_same_floats(run("sign", x), [-0.0, 0.0, NAN, -1.0, 1.0, -1.0, 1.0])


def test_rounding_ops():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.3, 8388609.0, INF, NAN], np.float32)
    afz = [math.copysign(math.floor(abs(float(v)) + 0.5), v) if math.isfinite(v) else v
           for v in x.astype(np.float64)]
    even = [float(round(float(v))) if math.isfinite(v) else v for v in x.astype(np.float64)]
    even = [math.copysign(e, v) for e, v in zip(even, x.astype(np.float64), strict=True)]
    assert_same_floats(run("round-nearest-afz", x), np.array(afz, np.float32))
    assert_same_floats(run("round-nearest-even", x), np.array(even, np.float32))
    assert_same_floats(run("floor", x), np.floor(x))
    assert_same_floats(run("ceil", x), np.ceil(x))


def test_remainder_has_the_dividend_sign():
    a = np.array([5.5, -5.5, 5.5, -0.0, INF, 1.0, 3.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, 1.0, 2.0, 0.0, INF], np.float32)
    expected = [math.fmod(x, y) if math.isfinite(x) and y != 0 else NAN
                for x, y in zip(a.tolist(), b.tolist(), strict=True)]
    assert_same_floats(run("remainder", a, b), np.array(expected, np.float32))


MATH = {
    "exponential": math.exp, "exponential-minus-one": math.expm1, "log": math.log,
    "log-plus-one": math.log1p, "sine": math.sin, "cosine": math.cos, "tan": math.tan,
    "tanh": math.tanh, "sqrt": math.sqrt, "rsqrt": lambda v: 1 / math.sqrt(v),
    "cbrt": lambda v: math.copysign(abs(v) ** (1 / 3), v), "erf": math.erf,
    "logistic": lambda v: 1 / (1 + math.exp(-v)),
}


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("op", sorted(MATH))
def test_transcendentals_match_math_module(op, dt):
    x = np.linspace(0.05, 3.0, 25).astype(dt)
    expected = np.array([MATH[op](v) for v in x.astype(np.float64)]).astype(dt)
    rtol = 2e-7 if dt == np.float32 else 1e-14  # the reference is correctly rounded
    np.testing.assert_allclose(run(op, x), expected, rtol=rtol)


def test_low_precision_is_computed_in_f32_and_rounded_once():
    a = np.array([1.0, 3.0, 1e-2, 250.0], BF16)
    b = np.array([2.0 ** -8, 2.0 ** -7, 3.0, 0.3], BF16)
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(BF16)
    assert bits(run("add", a, b)).tolist() == bits(expected).tolist()


def test_f16_logistic_is_expanded_in_f16():
    # XLA expands logistic to 1 / (1 + exp(-x)) before widening f16: exp overflows to inf.
    x = np.array([-12.0, -11.0, 0.0, 3.0], np.float16)
    h = np.float16
    with np.errstate(over="ignore"):
        expected = [h(1) / (h(1) + h(math.exp(-float(v)))) for v in x]
    assert run("logistic", x).tolist() == [float(v) for v in expected]
    assert float(run("logistic", x)[0]) == 0.0


def test_is_finite():
    x = np.array([0.0, -INF, INF, NAN, 1e38], np.float32)
    assert run("is-finite", x, dtype=np.bool_).tolist() == [True, False, False, False, True]


def test_atan2_quadrants():
    y = np.array([1.0, 1.0, -1.0, -1.0, 0.0, -0.0, 0.0, 1.0, INF], np.float32)
    x = np.array([1.0, -1.0, -1.0, 1.0, -1.0, -1.0, 0.0, 0.0, -INF], np.float32)
    expected = [math.atan2(a, b) for a, b in zip(y.tolist(), x.tolist(), strict=True)]
    np.testing.assert_allclose(run("atan2", y, x), np.array(expected, np.float32), rtol=1e-7)
    assert np.signbit(run("atan2", y, x)[5])


# ---- denormals: XLA CPU runs with flush-to-zero (measured, jaxlib 0.10.2) ---------------------

D32 = float(np.float32(1e-39))  # an f32 denormal
XLA_CPU_DENORMALS = [
    # (opcode, dtype, operands, XLA CPU result)
    ("add", np.float32, ([D32, 1.0], [D32, D32]), [0.0, 1.0]),
    ("multiply", np.float32, ([1e-20], [1e-20]), [0.0]),
    ("sqrt", np.float32, ([D32, -D32],), [0.0, -0.0]),
    ("log", np.float32, ([D32],), [-INF]),
    ("sign", np.float32, ([D32, -D32],), [0.0, -0.0]),
    ("negate", np.float32, ([D32],), [-D32]),  # a sign-bit operation keeps denormals
    ("abs", np.float32, ([-D32],), [D32]),
    ("sine", np.float32, ([D32, -D32],), [D32, -D32]),  # small-argument shortcut returns x
    ("exponential-minus-one", np.float32, ([D32],), [D32]),
    ("tanh", np.float32, ([D32],), [D32]),
    ("tanh", np.float64, ([1e-310],), [0.0]),
    ("cbrt", np.float32, ([D32, -D32],), [-5.595173541877215e-16] * 2),
    ("remainder", np.float32, ([D32, 1.0, D32], [1.0, D32, 0.0]), [D32, NAN, NAN]),
    ("atan2", np.float32, ([D32, D32, D32, D32], [0.0, D32, 1.0, 1e-30]),
     [math.pi / 2, NAN, D32, 0.0]),
    ("atan2", np.float64, ([1e-310, 1e-310, 1e-310], [1e-310, 1.0, -2.0]),
     [math.pi / 2, 0.0, -math.pi]),
    ("power", np.float32, ([D32, 2.0, INF], [0.5, D32, -D32]), [2.0 ** -75, 1.0, 0.0]),
    ("maximum", np.float32, ([D32], [0.0]), [0.0]),
    ("exponential", np.float32, ([-100.0],), [0.0]),  # e^-100 is an f32 denormal
]


@pytest.mark.parametrize("op,dt,operands,expected", XLA_CPU_DENORMALS,
                         ids=[f"{r[0]}-{np.dtype(r[1])}" for r in XLA_CPU_DENORMALS])
def test_denormals_like_xla_cpu(op, dt, operands, expected):
    got = run(op, *[np.array(v, dt) for v in operands])
    assert_same_floats(got, np.array(expected, dt))


def test_denormal_compares_and_converts_like_xla_cpu():
    d = np.array([D32, 0.0], np.float32)
    assert run("compare", d, np.zeros(2, np.float32), dtype=np.bool_,
               comparison_direction="EQ").tolist() == [True, True]
    assert run("convert", d, dtype=np.bool_).tolist() == [False, False]
    assert run("convert", d, dtype=np.float64).tolist() == [0.0, 0.0]
    # bf16 -> pred looks at the bits, f32 -> bf16 is integer rounding: both keep denormals.
    assert run("convert", d.astype(BF16), dtype=np.bool_).tolist() == [True, False]
    assert float(run("convert", d, dtype=BF16)[0]) == float(np.float32(D32).astype(BF16))
    # f16 values are normal in f32, so f16 denormals survive arithmetic.
    h = np.array([6e-8, 1e-5], np.float16)
    assert run("add", h, np.zeros(2, np.float16)).tolist() == h.tolist()


# ---- compare ------------------------------------------------------------------------------------

DIRECTIONS = {"EQ": lambda a, b: a == b, "NE": lambda a, b: a != b, "LT": lambda a, b: a < b,
              "LE": lambda a, b: a <= b, "GT": lambda a, b: a > b, "GE": lambda a, b: a >= b}
ORDERED = [-NAN, -INF, -1.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, INF, NAN]  # TOTALORDER, ascending


@pytest.mark.parametrize("direction", sorted(DIRECTIONS))
def test_compare_float_and_totalorder(direction):
    vals = np.array(ORDERED, np.float32)
    vals[[0, -1]] = np.array([0xFFC00000, 0x7FC00000], np.uint32).view(np.float32)  # ∓NaN
    a, b = np.repeat(vals, len(vals)), np.tile(vals, len(vals))
    rank = np.repeat(np.arange(len(vals)), len(vals)), np.tile(np.arange(len(vals)), len(vals))
    fn = DIRECTIONS[direction]
    ieee = [fn(x, y) for x, y in zip(a.tolist(), b.tolist(), strict=True)]
    total = [fn(x, y) for x, y in zip(*rank, strict=True)]
    assert run("compare", a, b, dtype=np.bool_, comparison_direction=direction,
               comparison_type="FLOAT").tolist() == ieee
    assert run("compare", a, b, dtype=np.bool_, comparison_direction=direction).tolist() == ieee
    assert run("compare", a, b, dtype=np.bool_, comparison_direction=direction,
               comparison_type="TOTALORDER").tolist() == total
    assert run("compare", a.astype(BF16), b.astype(BF16), dtype=np.bool_,
               comparison_direction=direction, comparison_type="TOTALORDER").tolist() == total


def test_compare_signed_unsigned_readings():
    a = np.array([-1, 0, 5], np.int32)
    b = np.array([1, 1, 5], np.int32)
    assert run("compare", a, b, dtype=np.bool_, comparison_direction="LT").tolist() == \
        [True, True, False]
    assert run("compare", a, b, dtype=np.bool_, comparison_direction="LT",
               comparison_type="UNSIGNED").tolist() == [False, True, False]
    u = np.array([255, 0], np.uint8)
    assert run("compare", u, np.array([1, 1], np.uint8), dtype=np.bool_,
               comparison_direction="GT").tolist() == [True, False]


def test_compare_complex_equality_only():
    a = np.array([1 + 2j, NAN + 0j, 3j], np.complex64)
    b = np.array([1 + 2j, NAN + 0j, 3 + 0j], np.complex64)
    assert run("compare", a, b, dtype=np.bool_, comparison_direction="EQ").tolist() == \
        [True, False, False]
    with pytest.raises(UnsupportedError):
        run("compare", a, b, dtype=np.bool_, comparison_direction="LT")


# ---- convert ------------------------------------------------------------------------------------

def _float_to_int(v: float, dt) -> int:
    width, signed = _info(dt)
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    if math.isnan(v):
        return 0
    if math.isinf(v):
        return hi if v > 0 else lo
    return min(max(math.trunc(v), lo), hi)


@pytest.mark.parametrize("dt", INT_TYPES + [np.dtype(np.int16)], ids=str)
@pytest.mark.parametrize("src", [np.float32, np.float64, BF16], ids=["f32", "f64", "bf16"])
def test_float_to_int_truncates_and_saturates(src, dt):
    x = np.array([NAN, -NAN, INF, -INF, 2147483520.0, 2.0 ** 31, -2.0 ** 31, -2.9e9, 3.9, -3.9,
                  -0.5, 4.3e9, 1.9e19, -9.3e18, 254.7, 127.5, -128.9, 7.9, -8.5], np.float64)
    x = x.astype(src)
    expected = [_float_to_int(float(v), dt) for v in x.astype(np.float64)]
    assert [int(v) for v in run("convert", x, dtype=dt)] == expected


@pytest.mark.parametrize("src", INT_TYPES, ids=str)
@pytest.mark.parametrize("dt", INT_TYPES, ids=str)
def test_int_to_int_wraps(src, dt):
    x = _int_samples(src)
    assert [int(v) for v in run("convert", x, dtype=dt)] == [_wrap(int(v), dt) for v in x]


def _bf16_rne(x: np.ndarray) -> np.ndarray:
    """f32 -> bf16 round-to-nearest-even written on the bits."""
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), (u >> 16).astype(np.uint16) | 0x40, rounded).view(BF16)


def test_f32_to_bf16_rounds_to_nearest_even():
    one = 0x3F800000
    u = np.array([one + 0x8000, one + 0x18000, one + 0x8001, one + 0x7FFF, 0x7F7FFFFF,
                  0xFF7FFFFF, 0x00008000, 0x80018000, 0x7FC00001], np.uint32)
    x = u.view(np.float32)
    assert bits(run("convert", x, dtype=BF16)).tolist() == bits(_bf16_rne(x)).tolist()


def _nearest_e4m3fn(v: float) -> float:
    """f64 -> f8e4m3fn rounded once, to nearest even; beyond 464 there is only NaN."""
    finite = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float64)
    cands = [(abs(c - v), int(i) & 1, c) for i, c in enumerate(finite) if not math.isnan(c)]
    cands += [(abs(s * 480.0 - v), 0, NAN) for s in (1, -1)]  # the first unrepresentable step
    return min(cands)[2]


def test_f64_to_narrow_floats_like_xla():
    v = np.array([1 + 2 ** -4 + 2 ** -30, -(1 + 2 ** -4 + 2 ** -30), 1 + 2 ** -4, 300.0,
                  464.0, 470.0, 2.0 ** -9 * 1.5], np.float64)
    got = run("convert", v, dtype=E4M3).astype(np.float64)
    assert_same_floats(got, np.array([_nearest_e4m3fn(float(x)) for x in v]))
    # f64 -> f16 and f64 -> bf16 go through f32 on XLA CPU (two roundings).
    w = np.array([1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -8 + 2 ** -30], np.float64)
    assert run("convert", w, dtype=np.float16).tolist() == \
        w.astype(np.float32).astype(np.float16).tolist()
    assert bits(run("convert", w, dtype=BF16)).tolist() == \
        bits(_bf16_rne(w.astype(np.float32))).tolist()


def test_int_and_pred_and_complex_conversions():
    big = np.array([2 ** 24 + 2 ** 16 + 1, -(2 ** 24 + 1), 7], np.int32)
    assert bits(run("convert", big, dtype=BF16)).tolist() == \
        bits(_bf16_rne(big.astype(np.float32))).tolist()  # through f32, like XLA
    assert run("convert", np.array([0, 2, -1], np.int32), dtype=np.bool_).tolist() == \
        [False, True, True]
    f = np.array([0.0, -0.0, NAN, 0.5], np.float32)
    assert run("convert", f, dtype=np.bool_).tolist() == [False, False, True, True]
    assert run("convert", np.array([True, False]), dtype=np.float32).tolist() == [1.0, 0.0]
    c = np.array([1.5 - 2j, -3 + 0.5j], np.complex64)
    assert run("convert", c, dtype=np.float32).tolist() == [1.5, -3.0]
    assert run("convert", c, dtype=np.int32).tolist() == [1, -3]
    assert run("convert", np.array([2.5], np.float32), dtype=np.complex64).tolist() == [2.5 + 0j]


# ---- bitcast-convert and reduce-precision ---------------------------------------------------------

def test_bitcast_convert_same_and_different_widths():
    x = np.array([[1.0, -2.5], [NAN, 3e-39]], np.float32)
    assert run("bitcast-convert", x, dtype=np.int32).tolist() == \
        [[struct.unpack("<i", struct.pack("<f", v))[0] for v in row] for row in x.tolist()]
    as_bytes = run("bitcast-convert", x, dtype=np.uint8, dims=(2, 2, 4))
    assert as_bytes.reshape(-1).tobytes() == struct.pack("<4f", *x.reshape(-1).tolist())
    back = run("bitcast-convert", as_bytes, dtype=np.float32, dims=(2, 2))
    assert bits(back).tolist() == bits(x).tolist()
    words = np.array([0x01234567, 0x89ABCDEF], np.uint32)
    assert run("bitcast-convert", words.reshape(1, 2), dtype=np.uint64, dims=(1,)).tolist() == \
        [0x89ABCDEF01234567]


def test_bitcast_convert_sub_byte():
    b = np.array([0x7F, -128, 0x5A], np.int8)
    nibbles = run("bitcast-convert", b, dtype=S4, dims=(3, 2))
    expected = [[_wrap(int(v) & 0xF, S4), _wrap((int(v) >> 4) & 0xF, S4)] for v in b]
    assert [[int(n) for n in row] for row in nibbles] == expected  # low nibble first
    assert run("bitcast-convert", nibbles, dtype=np.int8, dims=(3,)).tolist() == b.tolist()


def test_reduce_precision_matches_narrow_formats():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-6, 6, 200),
                        [0.0, -0.0, INF, -INF, 65504.0, 65520.0, 1e-5, 448.0, 250.0]])
    x = x.astype(np.float32)
    as_bf16 = run("reduce-precision", x, exponent_bits=8, mantissa_bits=7)
    assert bits(as_bf16).tolist() == bits(_bf16_rne(x).astype(np.float32)).tolist()
    # (5, 10) is f16 without denormals: values below 2**-14 become zero.
    with np.errstate(over="ignore"):
        half = x.astype(np.float16).astype(np.float32)
    half = np.where(np.abs(half) < 2.0 ** -14, np.copysign(0, x), half)
    assert bits(run("reduce-precision", x, exponent_bits=5, mantissa_bits=10)).tolist() == \
        bits(half.astype(np.float32)).tolist()
    nan = np.array([0x7FC00001, 0xFFFFFFFF], np.uint32).view(np.float32)
    assert bits(run("reduce-precision", nan, exponent_bits=3, mantissa_bits=0)).tolist() == \
        bits(nan).tolist()  # NaN payloads come back unchanged


# ---- select, complex parts, map, stochastic-convert, empty shapes --------------------------------

def test_select_scalar_and_array_predicates():
    t, f = np.arange(4, dtype=np.float32), -np.arange(4, dtype=np.float32)
    p = np.array([True, False, True, False])
    assert run("select", p, t, f, dtype=np.float32).tolist() == [0.0, -1.0, 2.0, -3.0]
    assert run("select", np.array(False), t, f, dtype=np.float32, dims=(4,)).tolist() == \
        f.tolist()


def test_complex_parts_and_arithmetic():
    re = np.array([1.0, INF, 0.0], np.float32)
    im = np.array([INF, 2.0, -0.0], np.float32)
    z = run("complex", re, im, dtype=np.complex64)
    assert z.real.tolist() == re.tolist() and z.imag.tolist() == im.tolist()
    assert run("real", z, dtype=np.float32).tolist() == re.tolist()
    assert run("imag", z, dtype=np.float32).tolist() == im.tolist()
    assert run("imag", re, dtype=np.float32).tolist() == [0.0, 0.0, 0.0]
    a = np.array([3 + 4j, NAN + INF * 1j], np.complex64)
    # |z| is max * sqrt(1 + (min/max)^2) in XLA: a NaN part wins over an infinite one.
    assert_same_floats(run("abs", a, dtype=np.float32), np.array([5.0, NAN], np.float32))
    w = np.array([1 + 2j, -3 + 0.5j], np.complex64)
    v = np.array([0.5 - 1j, 2 + 2j], np.complex64)
    quotients = [complex(x) / complex(y) for x, y in zip(w, v, strict=True)]
    np.testing.assert_allclose(run("divide", w, v), quotients, rtol=1e-6)


def _scalar_computation(name, build) -> Computation:
    comp = Computation(name)
    s = Shape.scalar("f32")
    x = comp.create(Opcode.PARAMETER, s, attrs=Attrs(parameter_number=0))
    y = comp.create(Opcode.PARAMETER, s, attrs=Attrs(parameter_number=1))
    comp.root = build(comp, s, x, y)
    return comp


def test_map_vectorized_and_per_element():
    def mul_add(comp, s, x, y):
        prod = comp.create(Opcode.MULTIPLY, s, [x, y])
        return comp.create(Opcode.ADD, s, [prod, x])

    inner = _scalar_computation("inner", mul_add)

    def via_call(comp, s, x, y):  # a call is not elementwise: forces the per-element path
        return comp.create(Opcode.CALL, s, [x, y], called=[inner])

    outer = _scalar_computation("outer", via_call)
    a = np.array([[1.0, -2.0], [0.5, NAN]], np.float32)
    b = np.array([[3.0, 4.0], [-1.0, 2.0]], np.float32)
    expected = a * b + a
    assert_same_floats(run("map", a, b, called=[inner]), expected)
    assert_same_floats(run("map", a, b, called=[outer], helpers=[inner]), expected)


def test_stochastic_convert_rounds_up_when_random_is_below_the_fraction():
    x = np.array([2.25, 2.25, -2.75, -2.75, 1e10, NAN, -1e10], np.float32)
    r = np.array([0x3FFFFFFF, 0x40000000, 0xBFFFFFFF, 0xC0000000, 0, 0, 0], np.uint32)

    def expected(v, rnd):
        if math.isnan(v):
            return 0
        whole, frac = math.floor(abs(v)), abs(v) - math.floor(abs(v))
        up = rnd < int(frac * 2 ** 32)
        return max(-2 ** 31, min(2 ** 31 - 1, int(math.copysign(whole + up, v))))

    got = run("stochastic-convert", x, r, dtype=np.int32)
    assert got.tolist() == [expected(float(v), int(n)) for v, n in zip(x, r, strict=True)]


EMPTY_UNARY = ["abs", "negate", "sign", "exponential", "floor", "round-nearest-afz", "tanh",
               "logistic", "is-finite", "cbrt", "erf"]


@pytest.mark.parametrize("op", EMPTY_UNARY)
def test_empty_shapes(op):
    x = np.zeros((2, 0), np.float32)
    out_dt = np.bool_ if op == "is-finite" else np.float32
    assert run(op, x, dtype=out_dt).shape == (2, 0)
    assert run("add", x, x).shape == (2, 0)
    assert run("convert", x, dtype=np.int8).shape == (2, 0)
    assert run("shift-left", np.zeros(0, np.int32), np.zeros(0, np.int32)).shape == (0,)


def test_rng_opcode_is_refused():
    with pytest.raises(UnsupportedError, match="not deterministic"):
        run("rng", np.float32(0), np.float32(1), dims=(3,), distribution=1)
