"""Elementwise ops: unary, binary, compare, select, clamp; result = operand dims.

HLO has no implicit broadcasting: every array operand has exactly the result's dims (clamp
alone accepts scalar bounds). Mixed precision is not allowed: operands share one element type.
"""

from __future__ import annotations

from ..opcodes import Opcode as O
from .common import P, arr, is_complex, is_integral, kind, operand, shape_text, type_name
from .registry import fail, register

# Which element kinds each unary op accepts ("signed" = signed ints and floats).
_FLOAT = frozenset({"float"})
_FLOAT_COMPLEX = frozenset({"float", "complex"})
_INTEGRAL = frozenset({"int", "uint"})
_NUMERIC = frozenset({"int", "uint", "float", "complex"})
_SIGNED = frozenset({"int", "float", "complex"})
_UNARY_KINDS = {
    O.FLOOR: _FLOAT, O.CEIL: _FLOAT, O.ROUND_NEAREST_AFZ: _FLOAT, O.ROUND_NEAREST_EVEN: _FLOAT,
    O.COS: _FLOAT_COMPLEX, O.SIN: _FLOAT_COMPLEX, O.TAN: _FLOAT_COMPLEX, O.EXP: _FLOAT_COMPLEX,
    O.EXPM1: _FLOAT_COMPLEX, O.LOG: _FLOAT_COMPLEX, O.LOG1P: _FLOAT_COMPLEX,
    O.LOGISTIC: _FLOAT_COMPLEX, O.RSQRT: _FLOAT_COMPLEX, O.SQRT: _FLOAT_COMPLEX,
    O.CBRT: _FLOAT_COMPLEX, O.TANH: _FLOAT_COMPLEX, O.ERF: _FLOAT_COMPLEX,
    O.CLZ: _INTEGRAL, O.POPCNT: _INTEGRAL, O.NEGATE: _NUMERIC, O.SIGN: _SIGNED,
    O.NOT: _INTEGRAL | {"pred"}, O.IS_FINITE: _FLOAT, O.ABS: _SIGNED,
    O.REAL: _FLOAT_COMPLEX, O.IMAG: _FLOAT_COMPLEX,
}
_KIND_WORDS = {
    _FLOAT: "floating-point", _FLOAT_COMPLEX: "floating-point or complex",
    _INTEGRAL: "integral", _NUMERIC: "numeric", _SIGNED: "signed, floating-point or complex",
    _INTEGRAL | {"pred"}: "pred or integral",
}


@register(*_UNARY_KINDS)
def unary(instr):
    s = operand(instr, 0)
    allowed = _UNARY_KINDS[instr.opcode]
    if kind(s) not in allowed:
        raise fail(f"operand element type must be {_KIND_WORDS[allowed]}, got {type_name(s)}")
    if instr.opcode == O.IS_FINITE:
        return arr(P.PRED, s.dims)
    if instr.opcode in (O.ABS, O.REAL, O.IMAG) and is_complex(s):
        return arr(P.F64 if s.element_type == P.C128 else P.F32, s.dims)
    return arr(s.element_type, s.dims)


@register(O.COPY, O.DOMAIN, O.OPT_BARRIER)
def passthrough(instr):
    """Copy, domain and opt-barrier return their operand's shape (tuples included)."""
    return instr.operands[0].shape


def _binary_operands(instr):
    lhs, rhs = operand(instr, 0, "lhs"), operand(instr, 1, "rhs")
    if lhs.dims != rhs.dims:
        raise fail(f"operands must have the same dimensions (no implicit broadcast in HLO), "
                   f"got {shape_text(lhs)} and {shape_text(rhs)}")
    if lhs.element_type != rhs.element_type:
        raise fail(f"operands must have the same element type, got {shape_text(lhs)} and "
                   f"{shape_text(rhs)}")
    return lhs


_ARITH = (O.SUBTRACT, O.ATAN2, O.POWER, O.DIVIDE, O.REMAINDER, O.SHIFT_LEFT,
          O.SHIFT_RIGHT_ARITHMETIC, O.SHIFT_RIGHT_LOGICAL)


@register(O.ADD, O.MAXIMUM, O.MINIMUM, O.MULTIPLY, *_ARITH, operands=2)
def binary(instr):
    s = _binary_operands(instr)
    if instr.opcode in _ARITH and s.element_type == P.PRED:
        raise fail("operands must be of an arithmetic type, got pred")
    return arr(s.element_type, s.dims)


@register(O.AND, O.OR, O.XOR, operands=2)
def logical(instr):
    s = _binary_operands(instr)
    if s.element_type != P.PRED and not is_integral(s):
        raise fail(f"operands must be pred or integral, got {type_name(s)}")
    return arr(s.element_type, s.dims)


@register(O.COMPLEX, operands=2)
def make_complex(instr):
    s = _binary_operands(instr)
    if s.element_type not in (P.F32, P.F64):
        raise fail(f"operands must be f32 or f64, got {type_name(s)}")
    return arr(P.C64 if s.element_type == P.F32 else P.C128, s.dims)


_DIRECTIONS = frozenset({"EQ", "NE", "LT", "LE", "GT", "GE"})
_COMPARISON_TYPES = frozenset({"FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"})


@register(O.COMPARE, operands=2)
def compare(instr):
    s = _binary_operands(instr)
    direction = instr.attrs.comparison_direction
    if direction is not None and direction not in _DIRECTIONS:
        raise fail(f"unknown comparison direction {direction}")
    ctype = instr.attrs.comparison_type
    if ctype is not None and ctype not in _COMPARISON_TYPES:
        raise fail(f"unknown comparison type {ctype}")
    return arr(P.PRED, s.dims)


@register(O.SELECT, operands=3)
def select(instr):
    pred = operand(instr, 0, "pred")
    on_true, on_false = operand(instr, 1, "on_true"), operand(instr, 2, "on_false")
    if pred.element_type != P.PRED:
        raise fail(f"predicate must have element type pred, got {type_name(pred)}")
    if on_true.dims != on_false.dims or on_true.element_type != on_false.element_type:
        raise fail(f"on_true and on_false must have the same shape, got {shape_text(on_true)} "
                   f"and {shape_text(on_false)}")
    if pred.dims != on_true.dims:
        raise fail(f"predicate dimensions must match the operands', got {shape_text(pred)} and "
                   f"{shape_text(on_true)}")
    return arr(on_true.element_type, on_true.dims)


@register(O.CLAMP, operands=3)
def clamp(instr):
    lo, x, hi = operand(instr, 0, "min"), operand(instr, 1, "operand"), operand(instr, 2, "max")
    for name, bound in (("min", lo), ("max", hi)):
        if bound.element_type != x.element_type:
            raise fail(f"{name} element type {type_name(bound)} differs from the operand's "
                       f"{type_name(x)}")
        if bound.rank != 0 and bound.dims != x.dims:
            raise fail(f"{name} must be a scalar or have the operand's dimensions, got "
                       f"{shape_text(bound)} for operand {shape_text(x)}")
    return arr(x.element_type, x.dims)
