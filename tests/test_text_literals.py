"""Constants in HLO text: XLA's spellings (taken from real XLA output) and bit-exact round trips.

The expected strings below are what XLA printed for the same values in JAX-generated modules
(and XLA's own parser tests): they pin the printer to XLA's spelling, not to itself.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from hloc.errors import ParseError
from hloc.ir import Literal, PrimitiveType, Shape, dtypes
from hloc.ir.text.parser import parse_module
from hloc.ir.text.printer import print_instruction, shape_text


def constant(shape_text: str, value_text: str):
    """Parse `constant(value_text)` of the given shape; check it prints back unchanged."""
    line = f"%c = {shape_text} constant({value_text})"
    module = parse_module(f"HloModule t\nENTRY e {{\n  {line}\n}}\n")
    instr = module.entry.root
    assert print_instruction(instr) == line
    return instr.attrs.literal


def bits(lit: Literal) -> list[int]:
    arr = lit.array
    return arr.view(np.dtype(f"uint{arr.dtype.itemsize * 8}")).reshape(-1).tolist()


# ---- XLA's spellings ----------------------------------------------------------------------
@pytest.mark.parametrize(("shape", "text", "values"), [
    ("f32[]", "2.5", [2.5]),
    ("f32[]", "0.1", [np.float32(0.1)]),
    ("f32[]", "0.333333343", [np.float32(1 / 3)]),
    ("f32[2]{0}", "{16777216, 0.100000009}", [np.float32(16777216), np.float32(0.1) + np.float32(1e-8)]),
    ("f32[6]{0}", "{inf, -inf, nan, -0, 1e-30, 3.4e+38}",
     [math.inf, -math.inf, math.nan, -0.0, np.float32(1e-30), np.float32(3.4e38)]),
    ("f64[2]{0}", "{1e+300, 4.94065645841247e-324}", [1e300, 2.0 ** -1074]),
    ("bf16[2]{0}", "{nan, 0.334}", [math.nan, float(ml_dtypes.bfloat16(1 / 3))]),
    ("f16[]", "0.099976", [float(np.float16(0.1))]),
    ("f16[3]{0}", "{inf, -inf, nan}", [math.inf, -math.inf, math.nan]),
    ("s8[]", "-7", [-7]),
    ("u64[]", "18446744073709551615", [2 ** 64 - 1]),
    ("s32[2,2,2]{2,1,0}", "{ { { 0, 1 }, { 2, 3 } }, { { 4, 5 }, { 6, 7 } } }", list(range(8))),
    ("f32[2,3]{1,0}", "{ { 0, 1, 2 }, { 3, 4, 5 } }", list(range(6))),
    ("pred[]", "true", [True]),
    ("pred[]", "false", [False]),
    ("pred[2]{0}", "{1, 0}", [True, False]),
    ("pred[2,1]{1,0}", "{ {1}, {0} }", [True, False]),
    ("f64[0,3]{1,0}", "{  }", []),
    ("f32[2,0,4,3]{3,2,1,0}", "{ { /*i0=0*/ }, { /*i0=1*/ } }", []),
    ("f32[2,1,1,2]{3,2,1,0}", "{ { /*i0=0*/ { /*i1=0*/ { 0, 1 } } }, { /*i0=1*/ { /*i1=0*/ { 2, 3 } } } }",
     [0, 1, 2, 3]),
    ("c64[2]{0}", "{(1, 2), (3, -4)}", [1 + 2j, 3 - 4j]),
    ("c128[1]{0}", "{(1.5, -2.5)}", [1.5 - 2.5j]),
    ("s4[3]{0}", "{-8, 0, 7}", [-8, 0, 7]),
])
def test_xla_spelling(shape, text, values):
    lit = constant(shape, text)
    got = lit.array.reshape(-1).tolist()
    assert len(got) == len(values)
    for g, v in zip(got, values, strict=True):
        if isinstance(v, float) and math.isnan(v):
            assert math.isnan(g)
        else:
            assert g == v and math.copysign(1, g.real if isinstance(g, complex) else g) == \
                math.copysign(1, v.real if isinstance(v, complex) else v)


def test_f8_nans_keep_their_sign_bit():
    assert bits(constant("f8e4m3fn[3]{0}", "{nan, 7, -nan}")) == [0x7F, 0x4E, 0xFF]
    assert bits(constant("f8e4m3b11fnuz[2]{0}", "{-nan, 7}")) == [0x80, 0x6E]


@pytest.mark.parametrize(("shape", "text", "raw"), [
    ("f32[]", "nan(0x1)", 0x7F800001),
    ("f32[]", "-nan(0x400001)", 0xFFC00001),
    ("f32[]", "-nan", 0xFFC00000),
    ("f32[]", "-0", 0x80000000),
    ("f64[]", "nan(0x8000000000001)", 0x7FF8000000000001),
    ("bf16[]", "nan(0x1)", 0x7F81),
    ("f16[]", "-nan(0x3)", 0xFC03),
])
def test_nan_payloads_and_negative_zero(shape, text, raw):
    assert bits(constant(shape, text)) == [raw]


def test_tuple_constant():
    lit = constant("(f32[2,1]{1,0}, f32[2]{0})", "( { {1}, {2} }, {2, 42} )")
    assert [e.array.tolist() for e in lit.elements] == [[[1.0], [2.0]], [2.0, 42.0]]


@pytest.mark.parametrize(("shape", "text", "canonical", "values"), [
    ("f32[4]{0}", "{1., .5, 1e3, 2E-1}", "{1, 0.5, 1000, 0.2}", [1, 0.5, 1000, np.float32(0.2)]),
    ("s32[3]{0}", "{1 2\n /* c */ 3}", "{1, 2, 3}", [1, 2, 3]),
    ("pred[2]{0}", "{true, false}", "{1, 0}", [True, False]),
    ("f32[]", "inf", "inf", [math.inf]),
])
def test_lenient_input_prints_canonically(shape, text, canonical, values):
    module = parse_module(f"HloModule t\nENTRY e {{\n  %c = {shape} constant({text})\n}}\n")
    instr = module.entry.root
    assert print_instruction(instr) == f"%c = {shape} constant({canonical})"
    assert instr.attrs.literal.array.reshape(-1).tolist() == values


@pytest.mark.parametrize(("shape", "text", "fragment"), [
    ("s8[]", "128", "out of range"),
    ("u32[]", "-1", "out of range"),
    ("f16[]", "70000", "out of range"),
    ("f32[]", "1e39", "out of range"),
    ("s32[]", "1.5", "expected an integer"),
    ("c64[]", "1", "written \\(real, imag\\)"),
    ("f32[2]{0}", "{1}", "expected 2 elements"),
    ("f32[2]{0}", "{{1, 2}}", "deeper than its rank"),
    ("f32[2,2]{1,0}", "{1, 2}", "nesting depth"),
    ("f32[]", "nan(0x0)", "out of range"),
    ("f8e4m3fn[]", "nan(0x1)", "does not support NaN payloads"),
    ("pred[]", "2", "not true/false/0/1"),
    ("f32[2]{0}", "{1, ...}", "only allowed as the whole literal"),
])
def test_bad_literals(shape, text, fragment):
    with pytest.raises(ParseError, match=fragment):
        parse_module(f"HloModule t\nENTRY e {{\n  %c = {shape} constant({text})\n}}\n")


# ---- bit-exact round trips ------------------------------------------------------------------
def _float_types():
    return [p for p in PrimitiveType if dtypes.info(p).is_float and dtypes.info(p).np_dtype is not None]


def _roundtrip(ptype: PrimitiveType, raw: np.ndarray) -> np.ndarray:
    arr = raw.view(dtypes.to_numpy(ptype))
    shape = Shape.array(ptype, arr.shape)
    module = parse_module(f"HloModule t\nENTRY e {{\n  %c = {shape_text(shape)} constant({{...}})\n}}\n")
    module.entry.root.with_attrs(literal=Literal(shape, arr))
    text = print_instruction(module.entry.root)
    reparsed = parse_module(f"HloModule t\nENTRY e {{\n  {text}\n}}\n").entry.root.attrs.literal
    return reparsed.array.view(raw.dtype), text


@pytest.mark.parametrize("ptype", _float_types(), ids=lambda p: dtypes.name(p))
def test_every_float_bit_pattern_round_trips(ptype):
    width = dtypes.to_numpy(ptype).itemsize * 8
    udt = np.dtype(f"uint{width}")
    if width <= 16:
        raw = np.arange(1 << width, dtype=np.uint64).astype(udt)
        if dtypes.info(ptype).bits == 4:
            raw = raw[:16]
    else:
        rng = np.random.default_rng(width)
        raw = rng.integers(0, 1 << 63, size=50_000, dtype=np.uint64).astype(udt)
        raw = np.concatenate([raw, rng.integers(0, 1 << 63, size=1000, dtype=np.uint64).astype(udt)
                              | np.array(1 << (width - 1), dtype=udt)])
    back, _ = _roundtrip(ptype, raw)
    assert np.array_equal(back, raw)


def test_printed_f32_text_reads_back_with_python_float():
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 1 << 32, size=20_000, dtype=np.uint64).astype(np.uint32)
    values = raw.view(np.float32)
    finite = np.isfinite(values)
    _, text = _roundtrip(PrimitiveType.F32, raw)
    body = text[text.index("({") + 2: text.rindex("})")]
    parsed = np.array([np.float32(float(t)) for t in body.split(", ") if "nan" not in t and "inf" not in t])
    assert np.array_equal(parsed.view(np.uint32), raw[finite])
