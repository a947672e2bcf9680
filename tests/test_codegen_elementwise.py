"""CPU kernels vs the interpreter for every elementwise opcode, on edge values of each type."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from .support.hlo import binary, unary
from .support.run import compare_with_interpreter
from .support.values import (
    F8_TYPES,
    FLOAT_TYPES,
    INT_TYPES,
    edge_values,
    random_values,
)

pytestmark = pytest.mark.cpu


def _pairs(type_name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """All pairs of edge values plus random pairs."""
    e = edge_values(type_name)
    a, b = (np.array(v) for v in zip(*itertools.product(e, e), strict=True))
    rng = np.random.default_rng(seed)
    ra, rb = random_values(type_name, 256, rng), random_values(type_name, 256, rng)
    return np.concatenate([a, ra]).astype(e.dtype), np.concatenate([b, rb]).astype(e.dtype)


def _binary_case(op: str, types: list[str], **tol) -> None:
    cases = {}
    for t in types:
        a, b = _pairs(t)
        cases[t] = (binary(op, t, len(a)), [a, b])
    compare_with_interpreter(cases, "cpu-kernels", **tol)


ARITH_TYPES = FLOAT_TYPES + F8_TYPES + INT_TYPES


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "remainder", "maximum",
                                "minimum"])
def test_binary_arithmetic(op):
    _binary_case(op, ARITH_TYPES)


@pytest.mark.parametrize("op", ["add", "multiply", "maximum", "minimum", "and", "or", "xor"])
def test_pred_binary(op):
    _binary_case(op, ["pred"])


@pytest.mark.parametrize("op", ["and", "or", "xor", "shift-left", "shift-right-logical",
                                "shift-right-arithmetic"])
def test_integer_binary(op):
    _binary_case(op, INT_TYPES)


def test_integer_power():
    _binary_case("power", INT_TYPES)


def _unary_case(op: str, types: list[str], out: str | None = None, **tol) -> None:
    cases = {}
    rng = np.random.default_rng(1)
    for t in types:
        a = np.concatenate([edge_values(t), random_values(t, 300, rng)])
        cases[t] = (unary(op, t, len(a), out=out), [a])
    compare_with_interpreter(cases, "cpu-kernels", **tol)


@pytest.mark.parametrize("op", ["negate", "abs", "sign"])
def test_sign_ops(op):
    _unary_case(op, FLOAT_TYPES + F8_TYPES + INT_TYPES)


@pytest.mark.parametrize("op", ["not", "count-leading-zeros", "popcnt"])
def test_integer_unary(op):
    _unary_case(op, INT_TYPES + (["pred"] if op == "not" else []))


@pytest.mark.parametrize("op", ["floor", "ceil", "round-nearest-even", "round-nearest-afz",
                                "sqrt"])
def test_exact_float_unary(op):
    _unary_case(op, FLOAT_TYPES + F8_TYPES)


def test_is_finite():
    _unary_case("is-finite", FLOAT_TYPES + F8_TYPES, out="pred")


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_compare(direction):
    cases = {}
    for t in FLOAT_TYPES + ["f8e4m3fn", "f8e5m2fnuz"] + INT_TYPES + ["pred"]:
        a, b = _pairs(t)
        kinds = [""]
        if t in FLOAT_TYPES or t.startswith("f8"):
            kinds.append(", type=TOTALORDER")
        for kind in kinds:
            key = f"{t}{'_total' if kind else ''}"
            cases[key] = (binary("compare", t, len(a), out="pred",
                                       attrs=f", direction={direction}{kind}"), [a, b])
    compare_with_interpreter(cases, "cpu-kernels")


def test_select_and_clamp():
    cases = {}
    rng = np.random.default_rng(3)
    for t in FLOAT_TYPES + INT_TYPES + ["pred", "f8e4m3fn"]:
        a, b = _pairs(t)
        n = len(a)
        p = rng.random(n) < 0.5
        cases[f"sel_{t}"] = (f"""
HloModule m
ENTRY e {{
  p = pred[{n}] parameter(0)
  a = {t}[{n}] parameter(1)
  b = {t}[{n}] parameter(2)
  ROOT c = {t}[{n}] select(p, a, b)
}}
""", [p, a, b])
        lo, hi = random_values(t, 1, rng)[0], random_values(t, 1, rng)[0]
        if t != "pred" and as_float(lo) > as_float(hi):
            lo, hi = hi, lo
        cases[f"clamp_{t}"] = (f"""
HloModule m
ENTRY e {{
  lo = {t}[] parameter(0)
  x = {t}[{n}] parameter(1)
  hi = {t}[] parameter(2)
  ROOT c = {t}[{n}] clamp(lo, x, hi)
}}
""", [np.asarray(lo), a, np.asarray(hi)])
    compare_with_interpreter(cases, "cpu-kernels")


def as_float(x) -> float:
    return float(np.asarray(x).astype(np.float64))


CONVERT_TYPES = FLOAT_TYPES + F8_TYPES + INT_TYPES + ["pred"]


@pytest.mark.parametrize("src", CONVERT_TYPES)
def test_convert(src):
    cases = {}
    rng = np.random.default_rng(4)
    a = np.concatenate([edge_values(src), random_values(src, 200, rng, scale=300.0)])
    if src in FLOAT_TYPES:
        with np.errstate(all="ignore"):
            a = np.concatenate([a, np.array([2.0**31, -2.0**31, 2.0**63, 4e9, 255.5, -128.5,
                                              300.7, -1.5e19], np.float64).astype(a.dtype)])
    for dst in CONVERT_TYPES:
        cases[dst] = (unary("convert", src, len(a), out=dst), [a])
    compare_with_interpreter(cases, "cpu-kernels")


SAME_WIDTH = {8: ["s8", "u8", "f8e4m3fn", "f8e5m2"], 16: ["s16", "u16", "f16", "bf16"],
              32: ["s32", "u32", "f32"], 64: ["s64", "u64", "f64"]}


def test_bitcast_convert_same_width():
    cases = {}
    for width, types in SAME_WIDTH.items():
        for src, dst in itertools.product(types, types):
            rng = np.random.default_rng(width)
            raw = rng.integers(0, 256, 64 * width // 8, dtype=np.uint8)
            src_dt = edge_values(src).dtype
            a = raw.view(src_dt) if src_dt.itemsize * 8 == width else raw[:64].view(src_dt)
            cases[f"{src}_{dst}"] = (unary("bitcast-convert", src, len(a), out=dst), [a])
    compare_with_interpreter(cases, "cpu-kernels")


def test_bitcast_convert_width_changes():
    n = 6
    wide = np.random.default_rng(5).integers(0, 2**31, n).astype(np.uint32)
    narrow = np.random.default_rng(6).integers(0, 256, (n, 4)).astype(np.uint8)
    cases = {
        "split": (f"HloModule m\nENTRY e {{\n a = u32[{n}] parameter(0)\n"
                  f" ROOT c = u8[{n},4] bitcast-convert(a)\n}}\n", [wide]),
        "join": (f"HloModule m\nENTRY e {{\n a = u8[{n},4] parameter(0)\n"
                 f" ROOT c = f32[{n}] bitcast-convert(a)\n}}\n", [narrow]),
    }
    compare_with_interpreter(cases, "cpu-kernels")


@pytest.mark.parametrize("t", ["f32", "f64", "bf16", "f16", "f8e4m3fn"])
def test_reduce_precision(t):
    cases = {}
    rng = np.random.default_rng(7)
    a = np.concatenate([edge_values(t), random_values(t, 200, rng, scale=1e4)])
    for e, m in [(8, 7), (5, 10), (5, 2), (4, 3), (11, 52), (8, 23), (3, 0)]:
        key = f"e{e}m{m}"
        cases[key] = (unary("reduce-precision", t, len(a),
                                  attrs=f", exponent_bits={e}, mantissa_bits={m}"), [a])
    compare_with_interpreter(cases, "cpu-kernels")
