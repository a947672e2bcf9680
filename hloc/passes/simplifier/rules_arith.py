"""Algebraic-simplifier rules for elementwise arithmetic, logic, select, compare and convert.

Every rule is exact: the result is bit-identical to the original for every input (NaN payloads
aside), so float rules fire only where IEEE arithmetic makes them so. That is why `x + 0` folds
for floats only when the zero is -0.0 (+0.0 would turn -0.0 into +0.0) and `x * 0` never folds
for floats (NaN and inf times zero are NaN).
"""

from __future__ import annotations

import math

from ...ir import Instruction, Opcode, PrimitiveType
from ...ir import dtypes as dt
from ..rewrite import P, RuleTable, is_splat_of, new, splat, splat_value

Op = Opcode
ARITH_RULES = RuleTable("simplifier-arith")
rule = ARITH_RULES.rule

_INTEGRAL = ("int", "uint")


def _kind(instr: Instruction) -> str:
    return instr.shape.dtype.kind if instr.shape.is_array else "other"


def _with_constant(instr: Instruction, value, *, commutative: bool = True):
    """The non-constant operand of a binary op whose other operand is a splat of `value`."""
    a, b = instr.operands
    if is_splat_of(b, value):
        return a
    if commutative and is_splat_of(a, value):
        return b
    return None


def _all_ones(instr: Instruction):
    """The value with every bit set in instr's element type (True for pred); None for a type
    that has no such value (bitwise ops on floats are not HLO). Computed from the type's
    width, not by NumPy: a compile that folds no constant never imports it."""
    kind = _kind(instr)
    if kind == "pred":
        return True
    if kind == "int":
        return -1
    if kind == "uint":
        return instr.shape.dtype.int_range[1]
    return None


# ---- additive and multiplicative identities ---------------------------------------------------
@rule(P(Op.ADD))
def add_zero(instr):
    """x + 0 → x for integers; x + (-0.0) → x for floats and complex (the exact identity)."""
    kind = _kind(instr)
    if kind in _INTEGRAL:
        return _with_constant(instr, 0)
    if kind == "float":
        return _with_constant(instr, -0.0)
    if kind == "complex":
        return _with_constant(instr, complex(-0.0, -0.0))
    return None


@rule(P(Op.SUBTRACT))
def subtract_zero(instr):
    """x - 0 → x (for floats +0.0: x - (+0.0) is exact, -0.0 included)."""
    if _kind(instr) in (*_INTEGRAL, "float", "complex"):
        return _with_constant(instr, 0, commutative=False)
    return None


@rule(P(Op.SUBTRACT, where=lambda i: i.operands[0] is i.operands[1] and _kind(i) in _INTEGRAL))
def subtract_self(instr):
    """x - x → 0 for integers (floats: inf - inf is NaN)."""
    return splat(0, instr.shape)


@rule(P(Op.MULTIPLY))
def multiply_one(instr):
    """x * 1 → x (not complex: (inf + 0i) * (1 + 0i) has a NaN imaginary part)."""
    if _kind(instr) in (*_INTEGRAL, "float", "pred"):
        return _with_constant(instr, 1)
    return None


@rule(P(Op.MULTIPLY))
def multiply_zero(instr):
    """x * 0 → 0 for integers and pred only (floats: NaN * 0 and inf * 0 are NaN)."""
    if _kind(instr) not in (*_INTEGRAL, "pred"):
        return None
    a, b = instr.operands
    for zero in (b, a):
        if is_splat_of(zero, 0):
            return zero
    return None


@rule(P(Op.DIVIDE))
def divide_one(instr):
    """x / 1 → x for integers and floats."""
    if _kind(instr) in (*_INTEGRAL, "float"):
        return _with_constant(instr, 1, commutative=False)
    return None


# The IEEE binary float types divide_by_power_of_two applies to (the f8 types are left alone).
_BINARY_FLOATS = (PrimitiveType.F16, PrimitiveType.BF16, PrimitiveType.F32, PrimitiveType.F64)


@rule(P(Op.DIVIDE))
def divide_by_power_of_two(instr):
    """x / c → x * (1/c) for floats where c is a splat of ±2^k and c and 1/c are both normal
    numbers of the type: the quotient and the product are the same real number, rounded the
    same way (denormal inputs and results are flushed alike), so every bit agrees. A divide
    is an expensive op to fusion, never duplicated; a multiply is cheap, so the scaled values
    of attention's softmax fuse into both of their readers (XLA's simplifier makes the same
    rewrite)."""
    if not instr.shape.is_array or instr.shape.element_type not in _BINARY_FLOATS:
        return None
    x, c = instr.operands
    value = splat_value(c)
    if value is None:
        return None
    f = float(value)
    if not math.isfinite(f) or f == 0.0 or abs(math.frexp(f)[0]) != 0.5:
        return None
    import ml_dtypes

    info = ml_dtypes.finfo(instr.shape.np_dtype)
    reciprocal = 1.0 / f
    if not all(float(info.smallest_normal) <= abs(v) <= float(info.max) for v in (f, reciprocal)):
        return None
    return new(Op.MULTIPLY, instr.shape, [x, splat(reciprocal, instr.shape)])


@rule(P(Op.POWER))
def power_one(instr):
    """pow(x, 1) → x for floats (IEEE pow(x, 1) is x for every x, NaN included)."""
    if _kind(instr) == "float":
        return _with_constant(instr, 1, commutative=False)
    return None


# ---- involutions and idempotent ops ----------------------------------------------------------
@rule(P(Op.NEGATE, P(Op.NEGATE)))
def negate_negate(instr):
    """-(-x) → x (exact for floats, and for wrapping integers)."""
    return instr.operands[0].operands[0]


@rule(P(Op.NOT, P(Op.NOT)))
def not_not(instr):
    """not(not(x)) → x."""
    return instr.operands[0].operands[0]


@rule(P((Op.MAXIMUM, Op.MINIMUM), where=lambda i: i.operands[0] is i.operands[1]))
def max_min_same(instr):
    """max(x, x) → x, min(x, x) → x."""
    return instr.operands[0]


@rule(P((Op.AND, Op.OR), where=lambda i: i.operands[0] is i.operands[1]))
def and_or_same(instr):
    """x & x → x, x | x → x."""
    return instr.operands[0]


# ---- logic with constants --------------------------------------------------------------------
@rule(P((Op.OR, Op.XOR)))
def or_xor_zero(instr):
    """x | 0 → x, x ^ 0 → x (false for pred)."""
    return _with_constant(instr, 0)


@rule(P(Op.AND))
def and_all_ones(instr):
    """x & ~0 → x (x and true → x for pred)."""
    ones = _all_ones(instr)
    return None if ones is None else _with_constant(instr, ones)


@rule(P(Op.AND))
def and_zero(instr):
    """x & 0 → 0 (x and false → false)."""
    a, b = instr.operands
    for zero in (b, a):
        if is_splat_of(zero, 0):
            return zero
    return None


@rule(P(Op.OR))
def or_all_ones(instr):
    """x | ~0 → ~0 (x or true → true)."""
    ones = _all_ones(instr)
    if ones is None:
        return None
    a, b = instr.operands
    for full in (b, a):
        if is_splat_of(full, ones):
            return full
    return None


# ---- select and compare ----------------------------------------------------------------------
@rule(P(Op.SELECT))
def select_constant_predicate(instr):
    """select(true, a, b) → a; select(false, a, b) → b."""
    pred, on_true, on_false = instr.operands
    if is_splat_of(pred, True):
        return on_true
    if is_splat_of(pred, False):
        return on_false
    return None


@rule(P(Op.SELECT, where=lambda i: i.operands[1] is i.operands[2]))
def select_same(instr):
    """select(p, a, a) → a."""
    return instr.operands[1]


@rule(P(Op.SELECT, where=lambda i: _kind(i) == "pred"))
def select_true_false(instr):
    """select(p, true, false) → p; select(p, false, true) → not(p)."""
    pred, on_true, on_false = instr.operands
    if is_splat_of(on_true, True) and is_splat_of(on_false, False):
        return pred
    if is_splat_of(on_true, False) and is_splat_of(on_false, True):
        return new(Op.NOT, instr.shape, [pred])
    return None


_REFLEXIVE = {"EQ": True, "LE": True, "GE": True, "NE": False, "LT": False, "GT": False}


@rule(P(Op.COMPARE, where=lambda i: i.operands[0] is i.operands[1]))
def compare_same(instr):
    """compare(x, x) → constant for integers and pred (floats: NaN is unequal to itself)."""
    if _kind(instr.operands[0]) not in (*_INTEGRAL, "pred"):
        return None
    direction = instr.attrs.comparison_direction
    if direction not in _REFLEXIVE:
        return None
    return splat(_REFLEXIVE[direction], instr.shape)


# ---- conversions -----------------------------------------------------------------------------
@rule(P((Op.CONVERT, Op.BITCAST_CONVERT)))
def convert_same_type(instr):
    """convert(x) → x and bitcast-convert(x) → x when the element type does not change."""
    x = instr.operands[0]
    return x if x.shape.element_type == instr.shape.element_type else None


@rule(P(Op.CONVERT, P(Op.CONVERT)))
def convert_round_trip(instr):
    """convert(convert(x: A → B) → A) → x when every A value is exactly representable in B."""
    inner = instr.operands[0]
    x = inner.operands[0]
    if x.shape.element_type != instr.shape.element_type:
        return None
    return x if lossless(x.shape.element_type, inner.shape.element_type) else None


_PRECISION = {PrimitiveType.F16: 11, PrimitiveType.BF16: 8, PrimitiveType.F32: 24,
              PrimitiveType.F64: 53}
_FLOAT_WIDENING = {
    (PrimitiveType.F16, PrimitiveType.F32), (PrimitiveType.F16, PrimitiveType.F64),
    (PrimitiveType.BF16, PrimitiveType.F32), (PrimitiveType.BF16, PrimitiveType.F64),
    (PrimitiveType.F32, PrimitiveType.F64),
}


def lossless(src: PrimitiveType, dst: PrimitiveType) -> bool:
    """Whether converting src → dst → src returns every src value unchanged."""
    s, d = dt.info(src), dt.info(dst)
    if s.kind == "pred":
        return d.kind in ("int", "uint", "float")
    if s.is_integral and d.is_integral:
        if s.kind == d.kind:
            return d.bits >= s.bits
        return s.kind == "uint" and d.bits > s.bits
    if s.is_integral and dst in _PRECISION:
        magnitude_bits = s.bits - (1 if s.kind == "int" else 0)
        return _PRECISION[dst] >= magnitude_bits
    return (src, dst) in _FLOAT_WIDENING
