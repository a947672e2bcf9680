"""f64 atan2 built in IR without libm (double-double helpers from fmath64.py).

atan2(y, x) = ±(O + sgn * atan(t)) with t = min(|x|, |y|) / max(|x|, |y|) in [0, 1] and
O in {0, pi/2, pi} by octant. The quotient is carried with its exact remainder, atan(t)
follows fdlibm's reduction (t < 7/16 directly, else atan(1/2) or atan(1) plus atan of
(t - c)/(1 + c t), whose rounding is corrected the same way) and fdlibm's degree-22 odd
polynomial; the octant constants are double-doubles. Within 0.65 ulp.
Special operands follow C99 (signed zeros, infinities, NaN).
"""

from __future__ import annotations

import math

from .core import DD, DMath

_ATAN_HALF = (4.63647609000806093515e-01, 2.26987774529616870924e-17)
_ATAN_ONE = (7.85398163397448278999e-01, 3.06161699786838301793e-17)
_PIO2 = (1.57079632679489655800e+00, 6.12323399573676603587e-17)
_PI = (3.14159265358979311600e+00, 1.22464679914735317720e-16)
_AT = (3.33333333333329318027e-01, -1.99999999998764832476e-01, 1.42857142725034663711e-01,
       -1.11111104054623557880e-01, 9.09088713343650656196e-02, -7.69187620504482999495e-02,
       6.66107313738753120669e-02, -5.83357013379057348645e-02, 4.97687799461593236017e-02,
       -3.65315727442169155270e-02, 1.62858201153657823623e-02)


def _quotient(m: DMath, num, den) -> DD:
    """num / den with its remainder term (0 where den is 0 or infinite)."""
    q = m.div(num, den)
    rem = m.div(m.fma_exact(m.neg(q), den, num), den)
    usable = m.b.and_(m.finite(rem), m.finite(q))
    return DD(q, m.sel(usable, rem, m.c(0.0)))


def _atan_unit(m: DMath, t: DD) -> DD:
    """atan(t) for t in [0, 1] as hi + lo (|lo| below a tenth of hi)."""
    mid = m.b.fcmp_ordered(">=", t.hi, m.c(7 / 16))
    top = m.b.fcmp_ordered(">=", t.hi, m.c(11 / 16))
    c = m.sel(top, m.c(1.0), m.sel(mid, m.c(0.5), m.c(0.0)))
    base_hi = m.sel(top, m.c(_ATAN_ONE[0]), m.sel(mid, m.c(_ATAN_HALF[0]), m.c(0.0)))
    base_lo = m.sel(top, m.c(_ATAN_ONE[1]), m.sel(mid, m.c(_ATAN_HALF[1]), m.c(0.0)))
    # atan t = atan c + atan u, u = (t - c)/(1 + c t): t - c and c t are exact.
    den = m.fast_two_sum(m.c(1.0), m.mul(c, t.hi))
    u = _quotient(m, m.sub(t.hi, c), den.hi)
    u_lo = m.sub(u.lo, m.div(m.mul(u.hi, den.lo), den.hi))
    z = m.mul(u.hi, u.hi)
    poly = m.mul(m.mul(u.hi, z), m.poly(z, _AT))
    # d atan: the remainders of u and of t, each over 1 + (its argument)^2.
    corr = m.add(m.div(u_lo, m.add(m.c(1.0), z)),
                 m.div(t.lo, m.fma(t.hi, t.hi, m.c(1.0))))
    head = m.two_sum(base_hi, u.hi)
    lo = m.add(head.lo, m.add(base_lo, m.sub(corr, poly)))
    return DD(head.hi, lo)


def atan2_f64(ctx, y, x):
    """atan2(y, x), within 0.65 ulp, C99 special cases."""
    m = DMath(ctx)
    b = m.b
    ax, ay = m.abs(x), m.abs(y)
    swap = m.gt(ay, ax)
    lo_v = m.sel(swap, ax, ay)
    hi_v = m.sel(swap, ay, ax)
    t = _quotient(m, lo_v, hi_v)
    both_inf = b.and_(m.eq(ax, m.c(math.inf)), m.eq(ay, m.c(math.inf)))
    t = DD(m.sel(both_inf, m.c(1.0), m.sel(m.eq(hi_v, m.c(0.0)), m.c(0.0), t.hi)),
           m.sel(b.or_(both_inf, m.eq(hi_v, m.c(0.0))), m.c(0.0), t.lo))
    a = _atan_unit(m, t)
    x_neg = b.icmp_signed("<", m.bits(x), m.ic(0))
    # O + sgn*atan t: (O, sgn) = (0, +), (pi/2, -), (pi, -), (pi/2, +) for the octants.
    flip = b.xor(swap, x_neg)
    off_hi = m.sel(swap, m.c(_PIO2[0]), m.sel(x_neg, m.c(_PI[0]), m.c(0.0)))
    off_lo = m.sel(swap, m.c(_PIO2[1]), m.sel(x_neg, m.c(_PI[1]), m.c(0.0)))
    sgn = lambda v: m.sel(flip, m.neg(v), v)  # noqa: E731
    s = m.two_sum(off_hi, sgn(a.hi))
    res = m.add(s.hi, m.add(s.lo, m.add(off_lo, sgn(a.lo))))
    tiny = b.and_(b.not_(b.or_(swap, x_neg)), m.lt(t.hi, m.c(2.2250738585072014e-308)))
    tiny = b.and_(tiny, b.and_(m.gt(ay, m.c(0.0)), m.finite(ax)))
    res = m.sel(tiny, _denormal_quotient(m, ay, ax), res)
    res = m.copysign(res, y)
    return m.sel(b.or_(m.isnan(x), m.isnan(y)), m.add(x, y), res)


def _denormal_quotient(m: DMath, num, den):
    """num/den for a quotient below 2**-1022, with its denormal bits built by integer code:
    also right where the hardware flushes denormal results (XLA CPU's mode, the emulator)."""
    scaled = m.div(m.mul(num, m.c(2.0 ** 600)), den)  # in [2**-474, 2**-422): normal
    steps = m.intrinsic("roundeven", m.mul(scaled, m.c(2.0 ** 474)))  # units of 2**-1074
    return m.from_bits(m.b.fptoui(m.clamp(steps, 0.0, 2.0 ** 52), m.ity))
