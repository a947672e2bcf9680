"""f64 erf built in IR without libm, on fdlibm's rational approximations (their
coefficients are published constants; the evaluation here is branch-free).

|x| < 0.84375: x + x*P(x^2)/Q(x^2); |x| < 1.25: erx + P1(s)/Q1(s), s = |x| - 1, erx the f32
nearest erf(1); |x| < 6: 1 - exp(-z*z - 0.5625) * exp((z - x)(z + x) + R(1/x^2)/S(1/x^2)) / x
with z = x cut to 21 bits (z*z + 0.5625 is exact, so the large exponent carries no rounding);
R/S switches coefficient sets at 1/0.35; beyond 6, ±1. Within 1 ulp (exp from fmath64.py).
"""

from __future__ import annotations

from .core import DMath, exp_f64

_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
_ERX = 8.45062911510467529297e-01
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02, 0.0)  # padded to _RA's length
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01, 0.0)  # padded to _SA's length
_HIGH_21_BITS = ~((1 << 32) - 1)


def _poly_pick(m: DMath, t, cond, if_true, if_false):
    """A polynomial in t whose coefficients are picked per element (same length)."""
    coeffs = [m.sel(cond, m.c(a), m.c(b)) for a, b in zip(if_true, if_false, strict=True)]
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = m.fma(acc, t, c)
    return acc


def _erf_small(m: DMath, x):
    z = m.mul(x, x)
    return m.fma(x, m.div(m.poly(z, _PP), m.poly(z, _QQ)), x)


def _erf_near_one(m: DMath, ax):
    s = m.sub(ax, m.c(1.0))
    return m.add(m.c(_ERX), m.div(m.poly(s, _PA), m.poly(s, _QA)))


def _erf_tail(ctx, m: DMath, ax):
    """1 - erfc(ax) for 1.25 <= ax < 6 (any value elsewhere, never NaN for finite ax)."""
    axc = m.clamp(ax, 1.25, 6.0)
    s = m.div(m.c(1.0), m.mul(axc, axc))
    near = m.lt(axc, m.c(1 / 0.35))
    ratio = m.div(_poly_pick(m, s, near, _RA, _RB),
                  _poly_pick(m, s, near, _SA, _SB))
    z = m.from_bits(m.b.and_(m.bits(axc), m.ic(_HIGH_21_BITS)))
    big = exp_f64(ctx, m.sub(m.mul(m.neg(z), z), m.c(0.5625)))
    small = exp_f64(ctx, m.add(m.mul(m.sub(z, axc), m.add(z, axc)), ratio))
    return m.sub(m.c(1.0), m.div(m.mul(big, small), axc))


def erf_f64(ctx, x):
    """erf x, within 1 ulp; ±0 stays itself, ±inf gives ±1, NaN stays NaN."""
    m = DMath(ctx)
    ax = m.abs(x)
    res = m.sel(m.lt(ax, m.c(1.25)), _erf_near_one(m, ax), _erf_tail(ctx, m, ax))
    res = m.sel(m.lt(ax, m.c(6.0)), res, m.c(1.0))
    res = m.copysign(res, x)
    res = m.sel(m.lt(ax, m.c(0.84375)), _erf_small(m, x), res)
    return m.sel(m.isnan(x), x, res)
