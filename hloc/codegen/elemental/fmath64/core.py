"""f64 exp, expm1, tanh and logistic built in IR without libm, and the double-double helpers
the other f64 functions (log.py, trig.py, erf.py beside it) build with.

Targets without a libm (CUDA) use these; the CPU keeps calling libm (mathfn.py). Every
function is within 1 ulp of the exact result over its whole domain (tests/test_fmath64.py
measures each against long-double numpy) and follows IEEE for inf, NaN, -0, overflow and
gradual underflow. Denormal operands are computed as the hardware sees them; mathfn.py adds
XLA CPU's flush-to-zero reading of them.

Accuracy comes from error-free transformations rather than longer polynomials: the reduced
argument and the last additions are carried as unevaluated sums hi + lo (double-double),
so little more than the final rounding remains (measured maxima 0.5 to 0.92 ulp). `llvm.fma.f64` is used
wherever an exact product error is needed (NVPTX has it natively, fma.rn.f64).

exp: x = k*ln2 + r, |r| <= ln2/2, with ln2 in two parts whose first has 32 significant
bits (so k*LN2_HI is exact for every k that matters and x - k*LN2_HI is exact by Sterbenz);
exp(r) - 1 = r + r^2/2 + r^3*q(r) with q the Taylor series cut after r^15/15! (relative
tail below 2**-62 on the interval) and r + r^2/2 exact as a pair, then 2**k * (1 + that).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from llvmlite import ir

from ..fmath import FMath
from ..types import F64

LN2_HI = 6.93147180369123816490e-01  # ln 2 to 21 bits: k * LN2_HI is exact for |k| < 2**32
LN2_LO = 1.90821492927058770002e-10  # ln 2 - LN2_HI
INV_LN2 = 1.4426950408889634
EXP_MAX_ARG = 710.0  # exp overflows above 709.78; clamping there keeps k in range
EXP_MIN_ARG = -746.0  # and underflows to 0 below -745.13
_EXPM1_Q = tuple(1.0 / math.factorial(j + 2) for j in range(14))  # 1/2!, 1/3!, ... 1/15!


class DD(NamedTuple):
    """An unevaluated sum hi + lo of two doubles (|lo| well below ulp(hi) unless noted)."""

    hi: ir.Value
    lo: ir.Value


class DMath(FMath):
    """FMath for f64 plus double-double arithmetic built from error-free transformations."""

    def __init__(self, ctx):
        super().__init__(ctx, F64)

    def fma_exact(self, a, b, c):
        """a*b + c rounded once (llvm.fma, unlike fmuladd, must not be split)."""
        return self.intrinsic("fma", a, b, c)

    def neg(self, x):
        return self.b.fneg(x)

    def two_sum(self, a, b) -> DD:
        """a + b = hi + lo exactly, for any order of magnitude (Knuth)."""
        s = self.add(a, b)
        bb = self.sub(s, a)
        err = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
        return DD(s, err)

    def fast_two_sum(self, a, b) -> DD:
        """a + b = hi + lo exactly when |a| >= |b| (or a's exponent is at least b's)."""
        s = self.add(a, b)
        return DD(s, self.sub(b, self.sub(s, a)))

    def two_prod(self, a, b) -> DD:
        p = self.mul(a, b)
        return DD(p, self.fma_exact(a, b, self.neg(p)))

    def dd_add(self, a: DD, b: DD) -> DD:
        s = self.two_sum(a.hi, b.hi)
        return self.fast_two_sum(s.hi, self.add(s.lo, self.add(a.lo, b.lo)))

    def dd_mul(self, a: DD, b: DD) -> DD:
        p = self.two_prod(a.hi, b.hi)
        cross = self.fma(a.hi, b.lo, self.mul(a.lo, b.hi))
        return self.fast_two_sum(p.hi, self.add(p.lo, cross))

    def dd_div(self, a: DD, b: DD) -> ir.Value:
        """(a.hi + a.lo) / (b.hi + b.lo) rounded (within about 0.5 ulp + |b.lo/b.hi|^2)."""
        q = self.div(a.hi, b.hi)
        rem = self.fma_exact(self.neg(q), b.hi, a.hi)
        rem = self.add(rem, self.sub(a.lo, self.mul(q, b.lo)))
        return self.add(q, self.div(rem, b.hi))

    def finite(self, x):
        return self.lt(self.abs(x), self.c(math.inf))

    def is_zero_bits(self, x):
        """x is ±0 by its bits (a denormal is not, even where compares flush it)."""
        return self.b.icmp_unsigned("==", self.b.shl(self.bits(x), self.ic(1)), self.ic(0))

    def clamp(self, x, lo: float, hi: float):
        """min(max(x, lo), hi) that lets NaN through."""
        x = self.sel(self.lt(x, self.c(lo)), self.c(lo), x)
        return self.sel(self.gt(x, self.c(hi)), self.c(hi), x)


# ---- exp family ----------------------------------------------------------------------------------

class _Reduced(NamedTuple):
    k: ir.Value  # i64
    r: DD  # exp(x) = 2**k * exp(r.hi + r.lo)


def _reduce_ln2(m: DMath, a, b=None) -> _Reduced:
    """(a + b) = k*ln2 + r for a clamped to the exp range; b is a small tail (or None)."""
    clamped = m.clamp(a, EXP_MIN_ARG, EXP_MAX_ARG)
    kf = m.intrinsic("roundeven", m.mul(clamped, m.c(INV_LN2)))
    head = m.fma_exact(m.neg(kf), m.c(LN2_HI), clamped)  # exact: see the module docstring
    tail = m.mul(kf, m.c(-LN2_LO))
    if b is not None:  # a tail only counts next to an a in range (it may be huge otherwise)
        usable = m.b.and_(m.finite(b), m.eq(clamped, a))
        tail = m.add(tail, m.sel(usable, b, m.c(0.0)))
    r = m.two_sum(head, tail)
    return _Reduced(m.to_int(kf), r)


def _expm1_small(m: DMath, r: DD) -> DD:
    """exp(r) - 1 for |r| <= ~0.35 as a pair: r + r^2/2 exactly, the rest in double."""
    sq = m.two_prod(r.hi, r.hi)
    half = DD(m.mul(sq.hi, m.c(0.5)), m.mul(sq.lo, m.c(0.5)))
    cube = m.mul(sq.hi, r.hi)
    tail = m.fma(cube, m.poly(r.hi, _EXPM1_Q[1:]), half.lo)
    # exp(hi + lo) - 1 = expm1(hi) + lo * exp(hi); lo is below ulp(hi), 1 + hi is enough.
    tail = m.fma(r.lo, m.add(m.c(1.0), r.hi), tail)
    head = m.two_sum(r.hi, half.hi)
    return m.fast_two_sum(head.hi, m.add(head.lo, tail))


def exp_dd(ctx, a, b=None) -> DD:
    """exp(a + b) as hi + lo (hi correctly rounded from the pair up to ~0.05 ulp).

    Below 2**-1022 the result is gradual underflow of hi (one more rounding), above
    709.78 inf; NaN gives NaN.
    """
    m = DMath(ctx)
    red = _reduce_ln2(m, a, b)
    e = _expm1_small(m, red.r)
    one_r = m.fast_two_sum(m.c(1.0), e.hi)
    lo = m.add(one_r.lo, e.lo)
    hi = m.add(one_r.hi, lo)
    lo = m.sub(lo, m.sub(hi, one_r.hi))
    return _scale_dd(m, DD(hi, lo), red.k)


def _scale_dd(m: DMath, v: DD, k) -> DD:
    return DD(m.scale(v.hi, k), m.scale(v.lo, k))


def exp_f64(ctx, x):
    """e**x, within 0.55 ulp (0.75 of a step for denormal results); overflow gives inf."""
    return exp_dd(ctx, x).hi


def expm1_dd(ctx, x) -> DD:
    """e**x - 1 as hi + lo, for x that is not tiny (|x| >= 2**-60) or not -0."""
    m = DMath(ctx)
    red = _reduce_ln2(m, m.clamp(x, -40.0, EXP_MAX_ARG))
    e = _expm1_small(m, red.r)
    # 2**k * (1 + e) - 1 = 2**k * (e + (1 - 2**-k)); beyond k = 60 the 2**-k no longer
    # matters (and 2**-k stays a normal number).
    kc = m.b.select(m.b.icmp_signed(">", red.k, m.ic(60)), m.ic(60), red.k)
    shift = m.two_sum(m.c(1.0), m.neg(m.pow2(m.b.neg(kc))))  # 1 - 2**-k, exactly
    s = m.two_sum(shift.hi, e.hi)
    lo = m.add(s.lo, m.add(shift.lo, e.lo))
    total = m.fast_two_sum(s.hi, lo)
    return _scale_dd(m, total, red.k)


def expm1_f64(ctx, x):
    """e**x - 1, within 1 ulp; -0 and values below 2**-54 come back as themselves."""
    m = DMath(ctx)
    res = expm1_dd(ctx, x).hi
    return m.sel(m.lt(m.abs(x), m.c(2.0 ** -54)), x, res)


def tanh_f64(ctx, x):
    """tanh x = E / (E + 2) with E = expm1(2|x|) in double-double: within 1 ulp."""
    m = DMath(ctx)
    a = m.clamp(m.abs(x), 0.0, 22.0)  # tanh(22) rounds to 1
    e = expm1_dd(ctx, m.add(a, a))
    den = m.two_sum(e.hi, m.c(2.0))
    den = DD(den.hi, m.add(den.lo, e.lo))
    res = m.dd_div(e, den)
    res = m.sel(m.lt(a, m.c(2.0 ** -54)), a, res)
    return m.copysign(res, x)


def logistic_f64(ctx, x):
    """1 / (1 + e**-x), as e/(1 + e) with e = exp(x) for negative x: within 1 ulp."""
    m = DMath(ctx)
    e = exp_dd(ctx, m.neg(m.abs(x)))
    den = m.fast_two_sum(m.c(1.0), e.hi)
    den = DD(den.hi, m.add(den.lo, e.lo))
    negative = m.lt(x, m.c(0.0))
    num = DD(m.sel(negative, e.hi, m.c(1.0)), m.sel(negative, e.lo, m.c(0.0)))
    res = m.dd_div(num, den)
    return m.sel(m.isnan(x), x, res)
