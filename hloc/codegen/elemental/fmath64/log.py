"""f64 log, log1p, pow and cbrt built in IR without libm (see fmath64.py for the helpers).

log: x = 2**k * v with v in [sqrt(1/2), sqrt(2)) taken from the bits (denormals normalized
with integer code, so flushing hardware cannot disturb it); log v = 2 atanh(s) with
s = (v - 1)/(v + 1), |s| <= 0.1716, as the Taylor series 2s + s*z*P(z), z = s*s. The
series is carried in double-double up to its third term and in double after that, which
keeps log x within 2**-67 relative: pow needs that (y*log x feeds exp, where an absolute
error becomes a relative one), log and log1p round the pair once.

cbrt: x = 2**(3q) * v with v in [1, 8); a quadratic guess (1.6%), two Halley steps and a
Newton step on the exact residual v - t**3 (from an fma) give the result within 0.5 ulp +
a hundredth.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

from llvmlite import ir

from .core import DD, LN2_HI, LN2_LO, DMath, exp_dd

_MANT_MASK = (1 << 52) - 1
_ONE_BITS = 1023 << 52
_SQRT2 = math.sqrt(2.0)


def _dd_const(q: Fraction) -> tuple[float, float]:
    hi = float(q)
    return hi, float(q - Fraction(hi))


# log v = 2s + s*z*(C0 + z*(C1 + z*R(z))): C0 = 2/3, C1 = 2/5 as double-doubles; R holds
# 2/(2i+3) for i = 2..12 (the next term is below 2**-66 of the result).
_C0 = _dd_const(Fraction(2, 3))
_C1 = _dd_const(Fraction(2, 5))
_R = tuple(2.0 / (2 * i + 3) for i in range(2, 13))
_CBRT_GUESS = (0.7625384427387195, 0.2680648401604704, -0.014670706343583972)  # fit on [1, 8)


class _Split(NamedTuple):
    k: ir.Value  # i64 exponent
    v: ir.Value  # f64 significand


def _significand(m: DMath, bits) -> _Split:
    """|x| = 2**k * v with v in [1, 2), from the bits of a finite nonzero |x|."""
    b = m.b
    field = b.lshr(bits, m.ic(52))
    mant = b.and_(bits, m.ic(_MANT_MASK))
    # A denormal's leading one moves up to bit 52: it has 11 + shift leading zeros.
    shift = b.sub(m.ctx.call("llvm.ctlz.i64", [mant, ir.Constant(ir.IntType(1), 0)]), m.ic(11))
    denormal = b.icmp_unsigned("==", field, m.ic(0))
    mant = b.select(denormal, b.shl(mant, shift), mant)
    k = b.select(denormal, b.sub(m.ic(-1022), shift), b.sub(field, m.ic(1023)))
    v = m.from_bits(b.or_(b.and_(mant, m.ic(_MANT_MASK)), m.ic(_ONE_BITS)))
    return _Split(k, v)


def _centered(m: DMath, s: _Split) -> _Split:
    """The same number with v in [sqrt(1/2), sqrt(2)) (halving is exact)."""
    big = m.gt(s.v, m.c(_SQRT2))
    return _Split(m.b.select(big, m.b.add(s.k, m.ic(1)), s.k),
                  m.sel(big, m.mul(s.v, m.c(0.5)), s.v))


def _log_significand(m: DMath, v) -> DD:
    """log v for v in [sqrt(1/2), sqrt(2)), to about 2**-67 relative."""
    f = m.sub(v, m.c(1.0))  # exact (Sterbenz)
    d = m.fast_two_sum(m.c(2.0), f)  # v + 1
    s_hi = m.div(f, d.hi)
    s_lo = m.div(m.sub(m.fma_exact(m.neg(s_hi), d.hi, f), m.mul(s_hi, d.lo)), d.hi)
    s = DD(s_hi, s_lo)
    z = m.dd_mul(s, s)
    inner = m.two_sum(m.c(_C1[0]), m.mul(z.hi, m.poly(z.hi, _R)))
    inner = DD(inner.hi, m.add(inner.lo, m.c(_C1[1])))
    p = m.dd_add(DD(m.c(_C0[0]), m.c(_C0[1])), m.dd_mul(z, inner))
    tail = m.dd_mul(m.dd_mul(s, z), p)
    return m.dd_add(DD(m.add(s_hi, s_hi), m.add(s_lo, s_lo)), tail)


def _log_split(m: DMath, s: _Split) -> DD:
    s = _centered(m, s)
    kf = m.b.sitofp(s.k, m.ty)
    k_ln2 = DD(m.mul(kf, m.c(LN2_HI)), m.mul(kf, m.c(LN2_LO)))  # the first product is exact
    return m.dd_add(k_ln2, _log_significand(m, s.v))


def log_dd(ctx, x) -> DD:
    """log x as hi + lo for finite x > 0 (denormals included); garbage elsewhere."""
    m = DMath(ctx)
    return _log_split(m, _significand(m, m.bits(x)))


def _log_specials(m: DMath, x, res):
    """log of 0 (or a value compares read as 0), negatives, inf and NaN."""
    res = m.sel(m.eq(x, m.c(math.inf)), x, res)
    negative = m.b.icmp_signed("<", m.bits(x), m.ic(0))  # by bits: -denormal too
    res = m.sel(negative, m.c(math.nan), res)
    res = m.sel(m.is_zero_bits(x), m.c(-math.inf), res)
    return m.sel(m.isnan(x), x, res)


def log_f64(ctx, x):
    """Natural log, within 0.5 ulp + a hundredth; log(±0) = -inf, log(<0) = NaN."""
    m = DMath(ctx)
    return _log_specials(m, x, log_dd(ctx, x).hi)


def log1p_f64(ctx, x):
    """log(1 + x) with 1 + x split exactly: log(u) + (1 + x - u)/u. Within 0.7 ulp; -0
    and tiny x come back as themselves."""
    m = DMath(ctx)
    u = m.two_sum(m.c(1.0), x)
    lg = log_dd(ctx, u.hi)
    res = m.add(lg.hi, m.add(lg.lo, m.div(u.lo, u.hi)))
    res = m.sel(m.lt(m.abs(x), m.c(2.0 ** -60)), x, res)
    res = m.sel(m.eq(x, m.c(math.inf)), x, res)
    res = m.sel(m.lt(x, m.c(-1.0)), m.c(math.nan), res)
    res = m.sel(m.eq(x, m.c(-1.0)), m.c(-math.inf), res)
    return m.sel(m.isnan(x), x, res)


# ---- pow --------------------------------------------------------------------------------------------

class _Parity(NamedTuple):
    integral: ir.Value  # i1: y is a (finite) integer
    odd: ir.Value  # i1: y is an odd integer


def _parity(m: DMath, y) -> _Parity:
    """Integer tests on the bits of y (compares would read a denormal y as 0)."""
    b = m.b
    bits = b.and_(m.bits(y), m.ic((1 << 63) - 1))
    e = b.sub(b.lshr(bits, m.ic(52)), m.ic(1023))  # unbiased exponent
    frac_bits = b.sub(m.ic(52), e)  # how many mantissa bits lie below the units bit
    shift = b.select(b.icmp_signed(">", frac_bits, m.ic(0)), frac_bits, m.ic(0))
    shift = b.select(b.icmp_signed(">", shift, m.ic(63)), m.ic(63), shift)
    mant = b.or_(b.and_(bits, m.ic(_MANT_MASK)), m.ic(1 << 52))
    below_units = b.sub(b.shl(m.ic(1), shift), m.ic(1))
    no_fraction = b.icmp_unsigned("==", b.and_(mant, below_units), m.ic(0))
    finite = b.icmp_signed("<", e, m.ic(1024))
    integral = b.or_(m.is_zero_bits(y), b.and_(finite, b.and_(
        b.icmp_signed(">=", e, m.ic(0)), no_fraction)))
    units = b.trunc(b.lshr(mant, shift), ir.IntType(1))
    odd = b.and_(integral, b.and_(b.icmp_signed("<=", e, m.ic(52)), units))
    return _Parity(integral, odd)


def _pow_log(m: DMath, x, xla_denormal_base: bool) -> DD:
    """log |x| as a pair, with 0 -> -inf and inf -> inf (tails 0)."""
    b = m.b
    bits = b.and_(m.bits(x), m.ic((1 << 63) - 1))
    split = _significand(m, bits)
    if xla_denormal_base:
        # XLA CPU's pow normalizes a denormal base by a scaling that flushing turns into
        # exactly 2**-1075: log |x| = -1075 ln 2.
        denormal = b.icmp_unsigned("<", bits, m.ic(1 << 52))
        split = _Split(b.select(denormal, m.ic(-1075), split.k),
                       m.sel(denormal, m.c(1.0), split.v))
    lg = _log_split(m, split)
    zero = m.is_zero_bits(x)
    inf = m.eq(m.abs(x), m.c(math.inf))
    hi = m.sel(zero, m.c(-math.inf), m.sel(inf, m.c(math.inf), lg.hi))
    hi = m.sel(m.isnan(x), x, hi)
    return DD(hi, m.sel(b.or_(zero, inf), m.c(0.0), lg.lo))


def pow_f64(ctx, x, y, *, xla_denormal_base: bool = False):
    """x**y (C99 special cases), exp(y * log|x|) with the product in double-double:
    within 0.55 ulp wherever the result is normal (and one denormal step below).

    xla_denormal_base: a denormal x acts as ±2**-1075, as XLA CPU's pow under DAZ.
    """
    m = DMath(ctx)
    b = m.b
    # A denormal y acts like any tiny y (its product with log|x| only needs the sign),
    # also where the hardware would read it as 0.
    y_den = b.and_(b.not_(m.is_zero_bits(y)), m.lt(m.abs(y), m.c(2.2250738585072014e-308)))
    yy = m.sel(y_den, m.copysign(m.c(2.0 ** -1000), y), y)
    lg = _pow_log(m, x, xla_denormal_base)
    prod = m.two_prod(yy, lg.hi)
    res = exp_dd(ctx, prod.hi, m.fma(yy, lg.lo, prod.lo)).hi
    return _pow_signs(m, x, y, res)


def _pow_signs(m: DMath, x, y, res):
    """Negative bases, NaN for a negative base and a fractional exponent, and the 1s."""
    b = m.b
    par = _parity(m, y)
    x_neg = b.icmp_signed("<", m.bits(x), m.ic(0))
    res = m.sel(b.and_(x_neg, par.odd), m.neg(res), res)
    x_regular = b.and_(m.finite(x), b.not_(m.is_zero_bits(x)))
    fractional = b.and_(m.finite(y), b.not_(par.integral))
    res = m.sel(b.and_(b.and_(x_neg, x_regular), fractional), m.c(math.nan), res)
    one = b.or_(m.is_zero_bits(y), m.eq(x, m.c(1.0)))
    unit_inf = b.and_(m.eq(m.abs(x), m.c(1.0)), m.eq(m.abs(y), m.c(math.inf)))
    return m.sel(b.or_(one, unit_inf), m.c(1.0), res)


# ---- cbrt -------------------------------------------------------------------------------------------

def _halley(m: DMath, t, v):
    """t * (t^3 + 2v) / (2t^3 + v): cubic convergence to cbrt(v)."""
    t3 = m.mul(m.mul(t, t), t)
    return m.mul(t, m.div(m.add(t3, m.add(v, v)), m.add(m.add(t3, t3), v)))


def _newton_exact(m: DMath, t, v):
    """t - (t^3 - v) / (3t^2) with the residual t^3 - v from exact products."""
    sq = m.two_prod(t, t)
    resid = m.add(m.fma_exact(sq.hi, t, m.neg(v)), m.mul(sq.lo, t))
    return m.sub(t, m.div(resid, m.mul(m.c(3.0), sq.hi)))


def cbrt_f64(ctx, x):
    """Cube root, within 0.5 ulp + a hundredth; ±0, ±inf and NaN come back as themselves."""
    m = DMath(ctx)
    b = m.b
    split = _significand(m, b.and_(m.bits(x), m.ic((1 << 63) - 1)))
    # k = 3q + rem with rem in {0, 1, 2}: offset k so that the division is unsigned.
    biased = b.add(split.k, m.ic(3 * 400))
    q = b.sub(b.udiv(biased, m.ic(3)), m.ic(400))
    rem = b.sub(split.k, b.mul(q, m.ic(3)))
    v = m.mul(split.v, m.pow2(rem))  # [1, 8)
    t = m.poly(v, _CBRT_GUESS)
    t = _halley(m, _halley(m, t, v), v)
    t = _newton_exact(m, t, v)
    res = m.copysign(m.mul(t, m.pow2(q)), x)
    special = b.or_(m.is_zero_bits(x), b.not_(m.finite(x)))
    return m.sel(special, x, res)
