"""f64 sine, cosine and tangent built in IR without libm, for every finite argument.

Argument reduction x = n*pi/2 + r, |r| <= ~pi/4, with r as a double-double:
- |x| < 2**28 (Cody-Waite): n = round(x * 2/pi); x - n*P1 is exact with an fma (both are
  multiples of 2**-53 and the difference is below 1), n*P2 is split exactly, and pi/2 - P1 -
  P2 - P3 is below 2**-160, so r carries 70+ correct bits even next to a multiple of pi/2
  (no double lies closer to one than 2**-61).
- Larger and non-finite x (Payne-Hanek, in a branch: it is rare): |x| = M * 2**(E-1075)
  with a 53-bit integer M, and the bits of 2/pi worth 2**-j with j <= E-1077 only add
  multiples of 4 to |x|*2/pi, so a 192-bit window of 2/pi starting at bit E-1076, times M
  modulo 2**192, is |x|*2/pi mod 4 in 2.190 fixed point (truncation error below 2**-137).
  Its fraction, normalized with a leading-zero count, becomes a double-double.
sin and cos of r use fdlibm's kernels (minimax polynomials of degree 13 and 14 with the tail
of r folded in), kept as hi + lo pairs; sin and cos round the pair once (within 0.8 ulp),
tan divides the normalized pairs (within 0.95 ulp).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import NamedTuple

from llvmlite import ir

from ..trig import two_over_pi_bits
from ..types import I64
from .core import DD, DMath

_I128 = ir.IntType(128)
_CW_LIMIT = 2.0 ** 28
_PH_MIN_EXPONENT = 1023 + 28  # biased exponent of the smallest Payne-Hanek argument
_PAD_BITS = 1077 - _PH_MIN_EXPONENT  # zeros ahead of 2/pi, so the first window starts at 0
_TABLE_WORDS = ((2046 - _PH_MIN_EXPONENT) >> 6) + 4
_MASK52 = (1 << 52) - 1


@functools.cache
def _pio2_parts() -> tuple[float, float, float]:
    """pi/2 as P1 + P2 + P3 (each the double nearest to what the previous ones leave)."""
    nbits = 400
    pio2 = Fraction(1 << nbits, two_over_pi_bits(nbits))  # 1 / (2/pi), to ~398 bits
    parts = []
    for _ in range(3):
        parts.append(float(pio2))
        pio2 -= Fraction(parts[-1])
    p1, p2, p3 = parts
    return p1, p2, p3


P1, P2, P3 = _pio2_parts()


@functools.cache
def _table() -> tuple[int, ...]:
    """2/pi after _PAD_BITS zeros, in 64-bit words (most significant first)."""
    nbits = 64 * _TABLE_WORDS
    bits = two_over_pi_bits(nbits - _PAD_BITS)
    words = ((bits >> (nbits - 64 * (q + 1))) & ((1 << 64) - 1) for q in range(_TABLE_WORDS))
    return tuple(w - (1 << 64) if w >> 63 else w for w in words)  # as signed i64 constants


class Reduced(NamedTuple):
    """x = n*pi/2 + r."""

    n: ir.Value  # i64, only n mod 4 matters
    r: DD


def _cody_waite(m: DMath, x) -> Reduced:
    kf = m.intrinsic("roundeven", m.mul(x, m.c(2.0 / math.pi)))
    head = m.fma_exact(m.neg(kf), m.c(P1), x)  # exact, see the module docstring
    p2 = m.two_prod(kf, m.c(P2))
    s = m.two_sum(head, m.neg(p2.hi))
    lo = m.sub(m.sub(s.lo, p2.lo), m.mul(kf, m.c(P3)))
    return Reduced(m.to_int(kf), m.fast_two_sum(s.hi, lo))


def _window(m: DMath, exponent) -> list[ir.Value]:
    """The 192 bits of the table starting at bit exponent - _PH_MIN_EXPONENT (3 words)."""
    b = m.b
    start = b.sub(exponent, m.ic(_PH_MIN_EXPONENT))
    shift = b.and_(start, m.ic(63))
    table = m.ctx.table(("fmath64.two_over_pi",), I64, _table())
    first = b.lshr(start, m.ic(6))
    words = []
    for k in range(4):
        ptr = b.gep(table, [ir.Constant(I64, 0), b.add(first, m.ic(k))], inbounds=True,
                    source_etype=table.value_type)
        words.append(b.load(ptr, typ=I64))
    return [m.ctx.call("llvm.fshl.i64", [words[k], words[k + 1], shift]) for k in range(3)]


def _turns(m: DMath, mag) -> tuple[ir.Value, ir.Value]:
    """(top word, next two words as i128) of M * window mod 2**192: |x| * 2/pi mod 4."""
    b = m.b
    exponent = b.lshr(mag, m.ic(52))
    exponent = m.ctx.call("llvm.umax.i64", [exponent, m.ic(_PH_MIN_EXPONENT)])
    exponent = m.ctx.call("llvm.umin.i64", [exponent, m.ic(2046)])  # inf/NaN: replaced later
    w0, w1, w2 = _window(m, exponent)
    mant = b.or_(b.and_(mag, m.ic(_MASK52)), m.ic(1 << 52))
    wide = b.zext(mant, _I128)
    low = b.mul(wide, b.zext(w2, _I128))
    mid = b.add(b.lshr(low, ir.Constant(_I128, 64)), b.mul(wide, b.zext(w1, _I128)))
    top = b.add(b.trunc(b.lshr(mid, ir.Constant(_I128, 64)), I64), b.mul(mant, w0))
    below = b.or_(b.shl(mid, ir.Constant(_I128, 64)),
                  b.zext(b.trunc(low, I64), _I128))  # the two lower words
    return top, below


def _fraction_dd(m: DMath, frac) -> DD:
    """A signed 0.128 fixed-point fraction (i128) as a double-double."""
    b = m.b
    c128 = lambda v: ir.Constant(_I128, v)  # noqa: E731
    negative = b.icmp_signed("<", frac, c128(0))
    mag = b.select(negative, b.neg(frac), frac)
    lz = m.ctx.call("llvm.ctlz.i128", [mag, ir.Constant(ir.IntType(1), 0)])
    lz = b.select(b.icmp_unsigned(">", lz, c128(127)), c128(127), lz)
    norm = b.shl(mag, lz)
    lz64 = b.trunc(lz, I64)
    hi = b.uitofp(b.trunc(b.lshr(norm, c128(75)), I64), m.ty)  # 53 bits: exact
    lo = b.uitofp(b.trunc(b.lshr(b.shl(norm, c128(53)), c128(64)), I64), m.ty)
    hi = m.mul(hi, m.pow2(b.sub(m.ic(-53), lz64)))
    lo = m.mul(lo, m.pow2(b.sub(m.ic(-117), lz64)))
    sign = lambda v: m.sel(negative, m.neg(v), v)  # noqa: E731
    return DD(sign(hi), sign(lo))


def _payne_hanek(m: DMath, x) -> Reduced:
    b = m.b
    bits = m.bits(x)
    mag = b.and_(bits, m.ic((1 << 63) - 1))
    top, below = _turns(m, mag)
    # Fraction bits moved up past the two integer bits, read as signed: the offset from
    # the nearest multiple in [-1/2, 1/2) quarter turns, and n rounded to match.
    frac = b.or_(b.shl(b.zext(top, _I128), ir.Constant(_I128, 66)),
                 b.lshr(below, ir.Constant(_I128, 62)))
    n = b.add(b.lshr(top, m.ic(62)), b.zext(b.icmp_signed("<", frac, ir.Constant(_I128, 0)), I64))
    f = _fraction_dd(m, frac)
    r_hi = m.mul(f.hi, m.c(P1))
    r_lo = m.add(m.fma_exact(f.hi, m.c(P1), m.neg(r_hi)),
                 m.fma(f.hi, m.c(P2), m.mul(f.lo, m.c(P1))))
    r = m.fast_two_sum(r_hi, r_lo)
    negative = b.icmp_signed("<", bits, m.ic(0))
    return Reduced(b.select(negative, b.neg(n), n),
                   DD(m.sel(negative, m.neg(r.hi), r.hi), m.sel(negative, m.neg(r.lo), r.lo)))


def reduce_pio2_f64(ctx, x) -> Reduced:
    """x = n*pi/2 + r for any finite x (garbage for inf and NaN, which callers replace)."""
    m = DMath(ctx)
    small = m.lt(m.abs(x), m.c(_CW_LIMIT))
    values = ctx.select_branches(small, lambda: _flat(_cody_waite(m, x)),
                                 lambda: _flat(_payne_hanek(m, x)))
    return Reduced(values[0], DD(values[1], values[2]))


def _flat(red: Reduced) -> tuple[ir.Value, ...]:
    return red.n, red.r.hi, red.r.lo


# ---- kernels on [-pi/4, pi/4] (fdlibm's coefficients) -------------------------------------------

_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
      2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
      -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


def sin_kernel(m: DMath, r: DD) -> DD:
    """sin(r.hi + r.lo) = hi + lo with hi = r.hi."""
    z = m.mul(r.hi, r.hi)
    v = m.mul(z, r.hi)
    poly = m.poly(z, _S[1:])
    # sin(x + y) = x + S1 x^3 + x^5 P(x^2) + y (1 - x^2/2), arranged as fdlibm does.
    inner = m.sub(m.mul(z, m.sub(m.mul(m.c(0.5), r.lo), m.mul(v, poly))), r.lo)
    return DD(r.hi, m.neg(m.sub(inner, m.mul(v, m.c(_S[0])))))


def cos_kernel(m: DMath, r: DD) -> DD:
    """cos(r.hi + r.lo) = hi + lo with hi = 1 - r.hi^2/2 rounded."""
    z = m.mul(r.hi, r.hi)
    poly = m.mul(z, m.poly(z, _C))
    hz = m.mul(m.c(0.5), z)
    w = m.sub(m.c(1.0), hz)
    lo = m.add(m.sub(m.sub(m.c(1.0), w), hz), m.sub(m.mul(z, poly), m.mul(r.hi, r.lo)))
    return DD(w, lo)


def _nonfinite_to_nan(m: DMath, x, res):
    """inf gives NaN and NaN stays itself (x - x is both)."""
    return m.sel(m.finite(x), res, m.sub(x, x))


def _sin_cos(ctx, x, shift: int):
    m = DMath(ctx)
    b = m.b
    red = reduce_pio2_f64(ctx, x)
    n = b.and_(b.add(red.n, m.ic(shift)), m.ic(3))
    s, c = sin_kernel(m, red.r), cos_kernel(m, red.r)
    odd = b.trunc(n, ir.IntType(1))
    v = m.add(m.sel(odd, c.hi, s.hi), m.sel(odd, c.lo, s.lo))
    v = m.sel(b.icmp_unsigned(">=", n, m.ic(2)), m.neg(v), v)
    return _nonfinite_to_nan(m, x, v)


def sin_f64(ctx, x):
    """sin x for every double: within 0.8 ulp; sin(±0) = ±0."""
    m = DMath(ctx)
    return m.sel(m.is_zero_bits(x), x, _sin_cos(ctx, x, 0))


def cos_f64(ctx, x):
    """cos x for every double: within 0.8 ulp."""
    return _sin_cos(ctx, x, 1)


def tan_f64(ctx, x):
    """tan x = sin/cos (or -cos/sin in odd quadrants) from the kernels' pairs."""
    m = DMath(ctx)
    b = m.b
    red = reduce_pio2_f64(ctx, x)
    # dd_div needs the quotient's first approximation close: the pairs are normalized.
    s = m.fast_two_sum(*sin_kernel(m, red.r))
    c = m.fast_two_sum(*cos_kernel(m, red.r))
    odd = b.trunc(red.n, ir.IntType(1))
    num = DD(m.sel(odd, m.neg(c.hi), s.hi), m.sel(odd, m.neg(c.lo), s.lo))
    den = DD(m.sel(odd, s.hi, c.hi), m.sel(odd, s.lo, c.lo))
    res = _nonfinite_to_nan(m, x, m.dd_div(num, den))
    return m.sel(m.is_zero_bits(x), x, res)
