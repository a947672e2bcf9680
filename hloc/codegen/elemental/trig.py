"""f32 sine, cosine and tangent, accurate over the whole f32 range, built in IR.

Argument reduction x = n*pi/2 + r (|r| <= pi/4) works on |x| and puts the sign back at the
end. For |x| >= 1 it is Payne-Hanek style and exact enough for every finite f32:
|x| = M * 2**(E-150) with a 24-bit integer M, and the bits of 2/pi worth 2**-j with
j <= E-152 only add multiples of 4 to |x|*2/pi, so a 96-bit window of 2/pi starting at bit
E-151, times M and kept modulo 2**96, is |x|*2/pi mod 4 as 2.62 fixed point. Rounding that
gives n mod 4 and the fraction r*2/pi, converted to r through f64. Below 1 there is nothing
to cut away: r = |x| up to pi/4, r = |x| - pi/2 (two-part pi/2, exact to an f32 rounding)
above.

Everything is integer arithmetic and selects, without branches or table loads: the window is
picked from constants by a select tree on the word index and aligned with funnel shifts,
because a vectorized table read is a gather, several times slower than the blends. So loops
over sin/cos/tan still vectorize (<16 x float> with AVX-512).

The fixed point resolves 2**-62 of pi/2, and no f32 lies closer than 2**-29.8 of pi/2 to a
multiple of pi/2 (16367173 * 2**72 does; the tests search every binade), so r keeps 30+
correct bits. The polynomials run in f32 on r: sin and cos within 1.5 ulp, tan within 3 ulp
over the whole range (tests/test_codegen_fixes.py measures it).
"""

from __future__ import annotations

import functools
import math

from llvmlite import ir

from .fmath import FMath
from .types import F32, F64, I32, I64

_SMALLEST_EXPONENT = 127  # biased exponent of 1.0; smaller arguments need no window
_PAD_BITS = 152 - _SMALLEST_EXPONENT  # zeros ahead of 2/pi: the window of 2**0 starts at 0
_WINDOW_WORDS = 3
_INDEX_BITS = ((254 - _SMALLEST_EXPONENT) >> 5).bit_length()  # bits of the first word's index
_TABLE_WORDS = (1 << _INDEX_BITS) + _WINDOW_WORDS
_PIO2_HI = 1.5707963705062866  # f32(pi/2); |x| - _PIO2_HI is exact for |x| in [pi/4, 1]
_PIO2_LO = math.pi / 2 - _PIO2_HI


def two_over_pi_bits(nbits: int) -> int:
    """floor(2/pi * 2**nbits), from Machin's formula in integer arithmetic."""
    work = nbits + 64  # guard bits: the truncations below cost a few units of 2**-work

    def arctan_inv(k: int) -> int:  # atan(1/k) * 2**work
        total, term, n, sign = 0, (1 << work) // k, 1, 1
        while term:
            total += sign * (term // n)
            term //= k * k
            n += 2
            sign = -sign
        return total

    pi_scaled = 16 * arctan_inv(5) - 4 * arctan_inv(239)
    return (1 << (nbits + work + 1)) // pi_scaled


@functools.cache
def window_words() -> tuple[int, ...]:
    """The zero-padded binary expansion of 2/pi in 32-bit words (most significant first)."""
    nbits = 32 * _TABLE_WORDS
    bits = two_over_pi_bits(nbits - _PAD_BITS)
    return tuple((bits >> (nbits - 32 * (q + 1))) & 0xFFFFFFFF for q in range(_TABLE_WORDS))


def _words_from(ctx, index: ir.Value, count: int) -> list[ir.Value]:
    """window_words()[index + k] for k < count, by a select tree on the bits of index."""
    b = ctx.builder
    level = [ir.Constant(I32, w) for w in window_words()]
    for bit in reversed(range(_INDEX_BITS)):
        step = 1 << bit
        taken = b.icmp_unsigned("!=", b.and_(index, ir.Constant(I32, step)), ir.Constant(I32, 0))
        reach = step + count - 1  # entries the lower index bits can still reach
        level = [b.select(taken, level[j + step], level[j]) for j in range(reach)]
    return level[:count]


def _quarter_turns(ctx, mag: ir.Value) -> ir.Value:
    """|x| * 2/pi mod 4 as unsigned 2.62 fixed point, from the bits of |x| >= 1."""
    b = ctx.builder
    c32 = lambda v: ir.Constant(I32, v)  # noqa: E731
    exponent = b.lshr(mag, c32(23))
    exponent = ctx.call("llvm.umax.i32", [exponent, c32(_SMALLEST_EXPONENT)])  # unused lanes
    exponent = ctx.call("llvm.umin.i32", [exponent, c32(254)])  # inf/NaN: replaced later
    start = b.sub(exponent, c32(_SMALLEST_EXPONENT))  # bit E-151 of 2/pi, past the padding
    shift = b.and_(start, c32(31))
    words = _words_from(ctx, b.lshr(start, c32(5)), _WINDOW_WORDS + 1)
    w0, w1, w2 = (ctx.call("llvm.fshl.i32", [words[k], words[k + 1], shift]) for k in range(3))
    mant = b.or_(b.and_(mag, c32(0x7FFFFF)), c32(0x800000))
    # M * (w0:w1:w2) * 2**-94 mod 4: w0 only counts modulo 2**32, w2 only above 2**32.
    wide = b.zext(mant, I64)
    top = b.shl(b.zext(b.mul(mant, w0), I64), ir.Constant(I64, 32))
    mid = b.mul(wide, b.zext(w1, I64))
    low = b.lshr(b.mul(wide, b.zext(w2, I64)), ir.Constant(I64, 32))
    return b.add(b.add(top, mid), low)


def _reduce_large(ctx, mag: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(r as f32, n as i32 with n mod 4 in its low bits) for |x| >= 1, given as bits."""
    b = ctx.builder
    turns = _quarter_turns(ctx, mag)
    n = b.trunc(b.lshr(b.add(turns, ir.Constant(I64, 1 << 61)), ir.Constant(I64, 62)), I32)
    # The fraction bits moved to the top, read as signed: the offset from n, in [-1/2, 1/2).
    centered = b.shl(turns, ir.Constant(I64, 2))
    r = b.fmul(b.sitofp(centered, F64), ir.Constant(F64, math.pi / 2 * 2.0 ** -64))
    return b.fptrunc(r, F32), n


def reduce_pio2(ctx, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(r as f32, n mod 4 as i32) with x = n*pi/2 + r, |r| <= pi/4 (garbage for inf and
    NaN, which the callers replace). A denormal x gives r = x, n = 0."""
    m = FMath(ctx)
    b = ctx.builder
    bits = m.bits(x)
    sign = b.and_(bits, m.ic(0x80000000))
    mag = b.xor(bits, sign)
    ax = m.from_bits(mag)
    r, n = _reduce_large(ctx, mag)
    below_one = m.lt(ax, m.c(1.0))
    near = m.sub(m.sub(ax, m.c(_PIO2_HI)), m.c(_PIO2_LO))
    r = m.sel(below_one, near, r)
    n = b.select(below_one, m.ic(1), n)
    within = b.fcmp_ordered("<=", ax, m.c(math.pi / 4))
    r = m.sel(within, ax, r)
    n = b.select(within, m.ic(0), n)
    # sin is odd: -x = (-n)*pi/2 + (-r).
    r = m.from_bits(b.xor(m.bits(r), sign))
    n = b.select(b.icmp_unsigned("!=", sign, m.ic(0)), b.neg(n), n)
    return r, b.and_(n, m.ic(3))


# Taylor series on |r| <= pi/4, cut where the next term is below 0.05 ulp (r**11/11! for
# sin, r**12/12! for cos).
_SIN = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, 5))
_COS = tuple((-1) ** k / math.factorial(2 * k) for k in range(6))


def _sin_poly(m: FMath, r):
    z = m.mul(r, r)
    # sin(r) has the sign of r on [-pi/4, pi/4]; copysign keeps sin(-0) = -0, which the sum
    # alone turns into +0 (its correction term is +0 there).
    return m.copysign(m.fma(m.mul(r, z), m.poly(z, _SIN), r), r)


def _cos_poly(m: FMath, r):
    return m.poly(m.mul(r, r), _COS)


def _special(m: FMath, x, res):
    """inf gives NaN and NaN stays itself (x - x is both)."""
    bad = m.b.fcmp_unordered("uno", m.sub(x, x), m.c(0.0))
    return m.sel(bad, m.sub(x, x), res)


def _sincos_quadrant(ctx, x, shift: int):
    m = FMath(ctx)
    b = ctx.builder
    r, n = reduce_pio2(ctx, x)
    n = b.and_(b.add(n, ir.Constant(I32, shift)), ir.Constant(I32, 3))
    odd = b.trunc(n, ir.IntType(1))
    v = m.sel(odd, _cos_poly(m, r), _sin_poly(m, r))
    negate = b.icmp_unsigned(">=", n, ir.Constant(I32, 2))
    return _special(m, x, m.sel(negate, b.fneg(v), v))


def sin_f32(ctx, x):
    """sin of an f32, within 1.5 ulp for every finite input.

    A denormal x gives x or a zero (depending on DAZ); mathfn.denormal_quirks decides.
    """
    return _sincos_quadrant(ctx, x, 0)


def cos_f32(ctx, x):
    """cos of an f32, within 1.5 ulp for every finite input (1 for denormals)."""
    return _sincos_quadrant(ctx, x, 1)


def tan_f32(ctx, x):
    """tan of an f32, within 3 ulp for every finite input (denormals: as sin_f32)."""
    m = FMath(ctx)
    b = ctx.builder
    r, n = reduce_pio2(ctx, x)
    s, c = _sin_poly(m, r), _cos_poly(m, r)
    odd = b.trunc(n, ir.IntType(1))
    return _special(m, x, m.sel(odd, m.div(b.fneg(c), s), m.div(s, c)))
