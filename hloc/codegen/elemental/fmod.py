"""Exact float remainder (C fmod, XLA remainder) with integer arithmetic, for targets whose
`frem` is not exact.

NVPTX expands `frem` as x - trunc(x / y) * y: the quotient rounds once |x/y| passes 2**24,
and fmod(-0, y) comes out +0. XLA CPU calls libm's fmodf, which is exact (the remainder of
two floats is always representable). This is libm's method on the mantissas: with
x = mx * 2**ex and y = my * 2**ey (ex >= ey), r = mx * 2**(ex - ey) mod my, taken a few bits
of the exponent difference at a time so the shifted remainder fits in 64 bits; then
r * 2**ey is packed back, subnormal if it must be, with x's sign. NaN results follow x86
(nanbits.x86_nan): fmod(x, 0) and fmod(inf, y) are the default NaN, a NaN operand comes
back quiet. XLA CPU runs with denormals-are-zero, which its fmod applies to the divisor only
(a subnormal y gives NaN; a subnormal x, or a subnormal result, stays as it is), and so
does this one, for f32 and f64 alike.
"""

from __future__ import annotations

from llvmlite import ir

from . import nanbits
from .types import F64, I64


def exact_fmod(ctx, x: ir.Value, y: ir.Value) -> ir.Value:
    """fmod(x, y) bit for bit as XLA CPU computes it (glibc's fmod, the divisor under DAZ)."""
    b = ctx.builder
    ity = nanbits.int_type(x)
    man = 52 if x.type == F64 else 23
    xb, yb = nanbits.float_bits(ctx, x), nanbits.float_bits(ctx, y)
    sign_mask = ir.Constant(ity, 1 << (ity.width - 1))
    ax, ay = b.and_(xb, b.not_(sign_mask)), b.and_(yb, b.not_(sign_mask))
    mx, ex = _unpack(b, ax, man)
    my, ey = _unpack(b, ay, man)
    # Bits of exponent difference per step: r < 2**(man+1), shifted by `step` stays < 2**63.
    step = 62 - man
    r = _reduce(ctx, b.urem(mx, my), my, b.sub(ex, ey), step)
    packed = _pack(ctx, r, ey, man, ity)
    exact = b.bitcast(b.or_(packed, b.and_(xb, sign_mask)), x.type)
    inf = ir.Constant(ity, ((1 << (ity.width - 1 - man)) - 1) << man)
    small = b.or_(b.icmp_unsigned("<", ax, ay), b.icmp_unsigned("==", ay, inf))
    result = b.select(small, x, exact)
    # A subnormal divisor counts as zero, as in XLA CPU's fmod under DAZ (x is not flushed).
    smallest_normal = ir.Constant(ity, 1 << man)
    invalid = b.or_(b.icmp_unsigned(">=", ax, inf), b.icmp_unsigned("<", ay, smallest_normal))
    invalid = b.or_(invalid, b.icmp_unsigned(">", ay, inf))
    nan = nanbits.x86_nan(ctx, nanbits.default_nan(x), x, y)
    return b.select(invalid, nan, result)


def _unpack(b, bits: ir.Value, man: int) -> tuple[ir.Value, ir.Value]:
    """(mantissa with its implicit bit, effective biased exponent >= 1) as i64."""
    wide = b.zext(bits, I64) if bits.type != I64 else bits
    expo = b.lshr(wide, ir.Constant(I64, man))
    frac = b.and_(wide, ir.Constant(I64, (1 << man) - 1))
    subnormal = b.icmp_unsigned("==", expo, ir.Constant(I64, 0))
    mant = b.select(subnormal, frac, b.or_(frac, ir.Constant(I64, 1 << man)))
    return mant, b.select(subnormal, ir.Constant(I64, 1), expo)


def _reduce(ctx, r: ir.Value, my: ir.Value, diff: ir.Value, step: int) -> ir.Value:
    """(r * 2**diff) mod my, `step` bits at a time (a loop: f64 may need ~200 steps)."""
    b = ctx.builder
    slot = ctx.alloca(I64)
    b.store(r, slot)
    diff = b.select(b.icmp_signed("<", diff, ir.Constant(I64, 0)), ir.Constant(I64, 0), diff)
    steps = b.udiv(b.add(diff, ir.Constant(I64, step - 1)), ir.Constant(I64, step))
    with ctx.loop(0, steps, "fmod") as i:
        left = b.sub(diff, b.mul(i, ir.Constant(I64, step)))
        shift = b.select(b.icmp_unsigned("<", left, ir.Constant(I64, step)), left,
                         ir.Constant(I64, step))
        b.store(b.urem(b.shl(b.load(slot, typ=I64), shift), my), slot)
    return b.load(slot, typ=I64)


def _pack(ctx, r: ir.Value, ey: ir.Value, man: int, ity: ir.IntType) -> ir.Value:
    """r * 2**(ey - bias - man) as float bits (r < 2**(man+1); r == 0 gives +0)."""
    b = ctx.builder
    lead = ctx.call("llvm.ctlz.i64", [r, ir.Constant(ir.IntType(1), 0)])
    # Shifts that bring the leading 1 to bit `man`, limited so the exponent stays >= 1.
    norm = b.sub(lead, ir.Constant(I64, 63 - man))
    room = b.sub(ey, ir.Constant(I64, 1))
    shift = b.select(b.icmp_signed("<", norm, room), norm, room)
    expo = b.shl(b.sub(room, shift), ir.Constant(I64, man))
    bits = b.add(expo, b.shl(r, shift))
    bits = b.select(b.icmp_unsigned("==", r, ir.Constant(I64, 0)), ir.Constant(I64, 0), bits)
    return bits if ity == I64 else b.trunc(bits, ity)
