"""Elementwise arithmetic lowerings with XLA semantics.

Integers wrap; x/0 is all ones and x%0 is x; INT_MIN/-1 is INT_MIN and INT_MIN%-1 is 0.
Float maximum/minimum propagate NaN and order -0 < +0. Narrow floats compute in f32 and are
rounded once per op (scalar.finish).
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Opcode
from . import nanbits
from .fmod import exact_fmod
from .nanbits import exact_nans, x86_nan
from .registry import emits
from .scalar import all_ones, const, contractible, elementwise, fmax, fmin, int_min, is_nan


def _safe_divisor(b, et, x, y):
    """(divisor never 0 nor -1-with-INT_MIN, divisor-is-zero flag)."""
    zero = b.icmp_unsigned("==", y, const(et, 0))
    bad = zero
    if et.is_signed:
        overflow = b.and_(b.icmp_unsigned("==", x, int_min(et)), b.icmp_unsigned("==", y, all_ones(et)))
        bad = b.or_(zero, overflow)
    return b.select(bad, const(et, 1), y), zero


def _int_div(ctx, instr, v, et):
    b = ctx.builder
    x, y = v
    safe, zero = _safe_divisor(b, et, x, y)
    # INT_MIN / -1: dividing by the substituted 1 yields INT_MIN itself, as XLA wants.
    q = b.sdiv(x, safe) if et.is_signed else b.udiv(x, safe)
    return b.select(zero, all_ones(et), q)


def _int_rem(ctx, instr, v, et):
    b = ctx.builder
    x, y = v
    safe, zero = _safe_divisor(b, et, x, y)
    r = b.srem(x, safe) if et.is_signed else b.urem(x, safe)
    return b.select(zero, x, r)


def int_power(ctx, instr, v, et):
    """Square-and-multiply over the exponent's low 6 bits; negative exponents give 1, ±1 or 0."""
    b = ctx.builder
    base, exp = v
    acc, sq, e = const(et, 1), base, exp
    for _ in range(min(6, et.bits)):
        odd = b.trunc(e, ir.IntType(1))
        acc = b.select(odd, b.mul(acc, sq), acc)
        sq = b.mul(sq, sq)
        e = b.lshr(e, const(et, 1))
    if et.is_signed or et.bits >= 8:
        # Unsigned exponents count as negative when their storage byte's top bit is set.
        negative = b.icmp_signed("<", exp, const(et, 0))
        exp_odd = b.trunc(exp, ir.IntType(1))
        is_one = b.icmp_unsigned("==", base, const(et, 1))
        is_minus_one = b.icmp_unsigned("==", base, all_ones(et))
        minus = b.select(exp_odd, base, const(et, 1))
        neg = b.select(is_one, const(et, 1), b.select(is_minus_one, minus, const(et, 0)))
        acc = b.select(negative, neg, acc)
    return acc


def _float_sign(ctx, instr, v, et):
    from .approx import FMath

    b = ctx.builder
    x = FMath(ctx, v[0].type).daz(v[0])  # a denormal reads as ±0 and comes back as one
    one = ctx.call(f"llvm.copysign.{'f64' if x.type == ir.DoubleType() else 'f32'}",
                   [ir.Constant(x.type, 1.0), x])
    keep = b.or_(is_nan(ctx, x), b.fcmp_ordered("==", x, ir.Constant(x.type, 0.0)))
    return b.select(keep, x, one)


def _int_sign(ctx, instr, v, et):
    b = ctx.builder
    (x,) = v
    if not et.is_signed:
        return b.zext(b.icmp_unsigned("!=", x, const(et, 0)), x.type)
    pos = b.icmp_signed(">", x, const(et, 0))
    neg = b.icmp_signed("<", x, const(et, 0))
    return b.select(pos, const(et, 1), b.select(neg, all_ones(et), const(et, 0)))


def _int_abs(ctx, instr, v, et):
    (x,) = v
    if not et.is_signed:
        return x
    # is_int_min_poison = false: |INT_MIN| wraps to INT_MIN.
    return ctx.call(f"llvm.abs.i{et.bits}", [x, ir.Constant(ir.IntType(1), 0)])


def _fb(method):
    return lambda ctx, instr, v, et: getattr(ctx.builder, method)(*v)


def _float_op(method):
    """A float binary op whose NaN result follows x86's rules (nanbits.x86_nan)."""
    return lambda ctx, instr, v, et: x86_nan(ctx, getattr(ctx.builder, method)(*v), *v)


def _contractible_op(method):
    """_float_op for fadd, fsub and fmul, which may fuse into FMAs (scalar.contractible)."""
    return lambda ctx, instr, v, et: x86_nan(
        ctx, contractible(ctx, getattr(ctx.builder, method)(*v)), *v)


def _float_rem(ctx, instr, v, et):
    if exact_nans(ctx):
        return exact_fmod(ctx, *v)  # NVPTX expands frem as x - trunc(x/y)*y: inexact
    return ctx.builder.frem(*v)


def _smax(signed_name, unsigned_name):
    def fn(ctx, instr, v, et):
        name = signed_name if et.is_signed else unsigned_name
        return ctx.call(f"llvm.{name}.i{et.bits}", v)
    return fn


_BINARY = {
    Opcode.ADD: {"float": _contractible_op("fadd"), "integral": _fb("add"), "pred": _fb("or_")},
    Opcode.SUBTRACT: {"float": _contractible_op("fsub"), "integral": _fb("sub")},
    Opcode.MULTIPLY: {"float": _contractible_op("fmul"), "integral": _fb("mul"), "pred": _fb("and_")},
    Opcode.DIVIDE: {"float": _float_op("fdiv"), "integral": _int_div},
    Opcode.REMAINDER: {"float": _float_rem, "integral": _int_rem},
    Opcode.MAXIMUM: {"float": lambda ctx, i, v, et: fmax(ctx, *v),
                     "integral": _smax("smax", "umax"), "pred": _fb("or_")},
    Opcode.MINIMUM: {"float": lambda ctx, i, v, et: fmin(ctx, *v),
                     "integral": _smax("smin", "umin"), "pred": _fb("and_")},
    Opcode.AND: {"integral": _fb("and_"), "pred": _fb("and_")},
    Opcode.OR: {"integral": _fb("or_"), "pred": _fb("or_")},
    Opcode.XOR: {"integral": _fb("xor"), "pred": _fb("xor")},
}
_UNARY = {
    Opcode.NEGATE: {"float": lambda ctx, i, v, et: nanbits.negate(ctx, v[0]),
                    "integral": lambda ctx, i, v, et: ctx.builder.neg(v[0])},
    Opcode.ABS: {"float": lambda ctx, i, v, et: nanbits.absolute(ctx, v[0]),
                 "integral": _int_abs},
    Opcode.SIGN: {"float": _float_sign, "integral": _int_sign},
    Opcode.NOT: {"integral": lambda ctx, i, v, et: ctx.builder.not_(v[0]),
                 "pred": lambda ctx, i, v, et: ctx.builder.not_(v[0])},
}

for _op, _rules in {**_BINARY, **_UNARY}.items():
    emits(_op)(elementwise(_rules))


@emits(Opcode.POWER)
def power(ctx, instr, gens):
    from .mathfn import float_power

    return elementwise({"integral": int_power, "float": float_power})(ctx, instr, gens)


def _select(ctx, instr, v, et):
    return ctx.builder.select(*v)


emits(Opcode.SELECT)(elementwise({"pred": _select}))


def _clamp(ctx, instr, v, et):
    lo, x, hi = v
    b = ctx.builder
    if et.is_float:
        return fmin(ctx, fmax(ctx, lo, x), hi)
    if et.kind == "pred":
        return b.and_(b.or_(lo, x), hi)
    mx, mn = ("smax", "smin") if et.is_signed else ("umax", "umin")
    return ctx.call(f"llvm.{mn}.i{et.bits}", [ctx.call(f"llvm.{mx}.i{et.bits}", [lo, x]), hi])


emits(Opcode.CLAMP)(elementwise({"float": _clamp, "integral": _clamp, "pred": _clamp},
                                operand=1))
