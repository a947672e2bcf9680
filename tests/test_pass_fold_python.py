"""What the passes compute in Python instead of NumPy (so that small compiles import none)
against what the reference interpreter and NumPy compute: constant folding's small integer
and pred ops and reshapes (passes/constant_folding.py fold_in_python), the reciprocals of
divide-by-constant, and the reducer identities of the simplifier (test_literal_bytes checks
ir/packing.py's NaNs)."""

from __future__ import annotations

import itertools
import math
import struct
from dataclasses import replace

import numpy as np
import pytest

from hloc.ir import Literal, Opcode, PrimitiveType, Shape
from hloc.ir.text.parser import parse_module
from hloc.passes import constant_folding
from hloc.passes.divide_by_constant import _python_reciprocal
from hloc.passes.simplifier.rules_slicing import _identity

P = PrimitiveType
Op = Opcode
RNG = np.random.default_rng(20261128)
INTS = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
        "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}
BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "and", "or", "xor"]
UNARY = ["negate", "abs", "sign", "not"]
DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


def _values(name: str, count: int) -> list[int]:
    """Edge values of the type (its extremes, 0, +-1) and random ones."""
    info = np.iinfo(INTS[name])
    edges = [info.min, info.max, 0, 1, info.max - 1] + ([-1, info.min + 1] if info.min else [])
    rand = RNG.integers(info.min, info.max, size=count, endpoint=True, dtype=INTS[name])
    return edges + [int(v) for v in rand]


def _text(body: str) -> str:
    return f"HloModule f\nENTRY e {{\n{body}\n}}\n"


def _literal_text(t: str, values) -> str:
    if t == "pred":
        return "{" + ", ".join("true" if v else "false" for v in values) + "}"
    return "{" + ", ".join(str(v) for v in values) + "}"


def _root(text: str):
    """The module's root, its constant operands' literals kept as bytes (as the proto reader
    keeps small ones; the text parser may give them arrays)."""
    entry = parse_module(text).entry
    for o in entry.post_order():
        if o.opcode == Op.CONSTANT and o.shape.is_array:
            o.attrs = replace(o.attrs, literal=Literal(o.shape, data=o.literal.data))
    return entry.root


def _fold_both(text: str):
    """(fold_in_python's literal, the interpreter's) for the module's root, whose operands
    are constants."""
    root = _root(text)
    return constant_folding.fold_in_python(root), constant_folding.interpret_instruction(root)


@pytest.mark.parametrize("t", sorted(INTS))
@pytest.mark.parametrize("op", BINARY)
def test_binary_integer_ops_match_the_interpreter(op, t):
    values = _values(t, 12)
    pairs = list(itertools.product(values, repeat=2))
    lhs, rhs = [a for a, _ in pairs], [b for _, b in pairs]
    # More pairs than fold_in_python takes at once: a chunk at a time.
    for start in range(0, len(pairs), constant_folding.PYTHON_ELEMENTS):
        chunk = slice(start, start + constant_folding.PYTHON_ELEMENTS)
        k = len(lhs[chunk])
        text = _text(f"  a = {t}[{k}] constant({_literal_text(t, lhs[chunk])})\n"
                     f"  b = {t}[{k}] constant({_literal_text(t, rhs[chunk])})\n"
                     f"  ROOT r = {t}[{k}] {op}(a, b)")
        ours, theirs = _fold_both(text)
        assert ours is not None, (op, t)
        assert ours == theirs, (op, t, lhs[chunk], rhs[chunk], ours, theirs)


@pytest.mark.parametrize("t", sorted(INTS))
@pytest.mark.parametrize("op", UNARY + [f"compare-{d}" for d in DIRECTIONS]
                         + [f"convert-{u}" for u in ("s8", "u16", "s64", "u64", "pred")])
def test_unary_compare_and_convert_match_the_interpreter(op, t):
    values = _values(t, 40)[:constant_folding.PYTHON_ELEMENTS]
    others = list(reversed(values))
    n = len(values)
    a = f"  a = {t}[{n}] constant({_literal_text(t, values)})\n"
    if op.startswith("compare-"):
        body = (a + f"  b = {t}[{n}] constant({_literal_text(t, others)})\n"
                f"  ROOT r = pred[{n}] compare(a, b), direction={op.split('-')[1]}")
    elif op.startswith("convert-"):
        body = a + f"  ROOT r = {op.split('-')[1]}[{n}] convert(a)"
    else:
        body = a + f"  ROOT r = {t}[{n}] {op}(a)"
    ours, theirs = _fold_both(_text(body))
    assert ours is not None, (op, t)
    assert ours == theirs, (op, t, ours, theirs)


def test_pred_ops_select_and_scalars_match_the_interpreter():
    cases = {
        "and": "  a = pred[4] constant({true, true, false, false})\n"
               "  b = pred[4] constant({true, false, true, false})\n"
               "  ROOT r = pred[4] and(a, b)",
        "not": "  a = pred[2] constant({true, false})\n  ROOT r = pred[2] not(a)",
        "xor": "  a = pred[] constant(true)\n  b = pred[] constant(false)\n"
               "  ROOT r = pred[] xor(a, b)",
        "select": "  p = pred[3] constant({true, false, true})\n"
                  "  a = s32[3] constant({1, 2, 3})\n  b = s32[3] constant({-1, -2, -3})\n"
                  "  ROOT r = s32[3] select(p, a, b)",
        "jax_where": "  x = s32[] constant(0)\n  z = s32[] constant(0)\n"
                     "  p = pred[] compare(x, z), direction=EQ\n  one = s32[] constant(1)\n"
                     "  ROOT r = s32[] select(p, one, x)",
        "compare_pred": "  a = pred[2] constant({true, false})\n"
                        "  b = pred[2] constant({false, false})\n"
                        "  ROOT r = pred[2] compare(a, b), direction=GT",
        "reshape": "  a = s32[6] constant({1, 2, 3, 4, 5, 6})\n  ROOT r = s32[2,3] reshape(a)",
        "reshape_f32": "  a = f32[2,2] constant({{1.5, -0}, {nan, inf}})\n"
                       "  ROOT r = f32[4,1] reshape(a)",
    }
    for name, body in cases.items():
        root = _root(_text(body))
        if name == "jax_where":  # fold the compare first, as the pass does
            pred = root.operands[0]
            folded = constant_folding.fold_in_python(pred)
            assert folded is not None
            assert folded == constant_folding.interpret_instruction(pred)
            continue
        ours = constant_folding.fold_in_python(root)
        assert ours is not None, name
        assert ours == constant_folding.interpret_instruction(root), name


@pytest.mark.parametrize("body", [
    # Floats, a signed comparison of unsigned bits, more elements than it takes, a scalar
    # predicate of an array select, division: the interpreter's.
    "  a = f32[] constant(1)\n  b = f32[] constant(2)\n  ROOT r = f32[] add(a, b)",
    "  a = u8[] constant(200)\n  b = u8[] constant(1)\n"
    "  ROOT r = pred[] compare(a, b), direction=LT, type=SIGNED",
    "  a = s32[65] constant({" + ", ".join(["1"] * 65) + "})\n  ROOT r = s32[65] negate(a)",
    "  p = pred[] constant(true)\n  a = s32[2] constant({1, 2})\n  b = s32[2] constant({3, 4})\n"
    "  ROOT r = s32[2] select(p, a, b)",
    "  a = s32[] constant(7)\n  b = s32[] constant(0)\n  ROOT r = s32[] divide(a, b)",
])
def test_what_python_leaves_to_the_interpreter(body):
    root = _root(_text(body))
    assert constant_folding.fold_in_python(root) is None


@pytest.mark.parametrize("ptype,np_type", [(P.F16, np.float16), (P.F32, np.float32),
                                           (P.F64, np.float64)])
def test_reciprocals_match_numpy(ptype, np_type):
    """Every finite nonzero value of a random bit pattern (subnormals, huge values whose
    reciprocal is subnormal or zero, values whose reciprocal overflows) and edge values: the
    reciprocal the pass computes in Python, where it computes one, is NumPy's, bit for bit."""
    info = np.finfo(np_type)
    width = np.dtype(np_type).itemsize * 8
    raw = RNG.integers(0, 2 ** width - 1, size=3000, dtype=np.uint64, endpoint=True)
    values = raw.astype(np.dtype(f"uint{width}")).view(np_type)
    values = [float(v) for v in values if np.isfinite(v) and v != 0]
    values += [1.0, 3.0, -7.0, 0.1, float(info.tiny), float(info.smallest_subnormal),
               float(info.max), 1 / 3, 65504.0, 1000.0]
    computed = 0
    for v in values:
        exact = np.array([v], np_type)
        literal = Literal(Shape.array(ptype, (1,)), exact)
        literal = Literal(Shape.array(ptype, (1,)), data=literal.data)  # kept as bytes
        ours = _python_reciprocal(literal, ptype)
        with np.errstate(all="ignore"):
            want = (np.asarray(1, np_type) / exact).astype(np_type)
        if ours is None:
            assert math.isinf(float(want[0])), (ptype, v)  # only an overflow is NumPy's
            continue
        computed += 1
        assert ours.data == want.tobytes(), (ptype, v, ours.data.hex(), want.tobytes().hex())
    assert computed > len(values) // 2


def test_reciprocal_of_zero_nan_or_a_narrow_type_is_numpys():
    for value in (0.0, -0.0, math.inf, math.nan):
        literal = Literal(Shape.scalar(P.F32), data=struct.pack("<f", value))
        assert _python_reciprocal(literal, P.F32) is None
    bf16 = Literal(Shape.scalar(P.BF16), np.array(2.0))
    assert _python_reciprocal(bf16, P.F32) is None


@pytest.mark.parametrize("t", ["s8", "s32", "u8", "u64"])
def test_reducer_identities_are_the_types_extremes(t):
    info = np.iinfo(INTS[t])
    shape = Shape.scalar(getattr(P, t.upper()))
    assert _identity(Op.MAXIMUM, shape) == info.min and _identity(Op.MINIMUM, shape) == info.max
    assert _identity(Op.AND, shape) == (-1 if info.min else info.max)
