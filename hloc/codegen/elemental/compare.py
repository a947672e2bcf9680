"""compare (FLOAT, TOTALORDER, SIGNED, UNSIGNED) and is-finite."""

from __future__ import annotations

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Opcode
from .registry import emits
from .scalar import elementwise, int_bits_of_float

_FLOAT_PREDICATES = {"EQ": ("==", True), "NE": ("!=", False), "LT": ("<", True),
                     "LE": ("<=", True), "GT": (">", True), "GE": (">=", True)}
_INT_PREDICATES = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _direction(instr) -> str:
    direction = instr.attrs.comparison_direction or ""
    if direction not in _INT_PREDICATES:
        raise UnsupportedError(f"compare %{instr.name}: unknown direction '{direction}'")
    return direction


def _default_type(et) -> str:
    if et.is_float:
        return "FLOAT"
    return "SIGNED" if et.is_signed else "UNSIGNED"


def total_order_key(ctx, x: ir.Value) -> ir.Value:
    """Signed integers ordering floats totally: -NaN < -inf < ... < -0 < +0 < ... < NaN.

    `x` is a register value (f32 or f64: narrow floats arrive widened to f32, as XLA CPU keys
    them, so the fnuz types' NaN orders as -NaN).
    """
    return total_order_of_bits(ctx.builder, ctx.builder.bitcast(x, int_bits_of_float(x)))


def total_order_of_bits(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """The total-order key of a float's bits read as an integer: sign-magnitude → two's
    complement, flipping every non-sign bit of the negative ones."""
    ity = bits.type
    flipped = b.xor(bits, ir.Constant(ity, (1 << (ity.width - 1)) - 1))
    return b.select(b.icmp_signed("<", bits, ir.Constant(ity, 0)), flipped, bits)


def compare_values(ctx, direction: str, ctype: str, et, x, y) -> ir.Value:
    """One comparison of register values of type `et`."""
    b = ctx.builder
    if et.is_float and ctype == "TOTALORDER":
        return b.icmp_signed(_INT_PREDICATES[direction], total_order_key(ctx, x),
                             total_order_key(ctx, y))
    if et.is_float:
        op, ordered = _FLOAT_PREDICATES[direction]
        cmp = b.fcmp_ordered if ordered else b.fcmp_unordered
        return cmp(op, x, y)
    if ctype == "SIGNED" and et.kind != "pred":
        return b.icmp_signed(_INT_PREDICATES[direction], x, y)
    return b.icmp_unsigned(_INT_PREDICATES[direction], x, y)


def _compare(ctx, instr, v, et):
    ctype = instr.attrs.comparison_type or _default_type(et)
    return compare_values(ctx, _direction(instr), ctype, et, *v)


emits(Opcode.COMPARE)(elementwise({"float": _compare, "integral": _compare, "pred": _compare}))


def _is_finite(ctx, instr, v, et):
    x = v[0]
    suffix = "f64" if x.type == ir.DoubleType() else "f32"
    mag = ctx.call(f"llvm.fabs.{suffix}", [x])
    return ctx.builder.fcmp_ordered("<", mag, ir.Constant(x.type, float("inf")))


emits(Opcode.IS_FINITE)(elementwise({"float": _is_finite}))
