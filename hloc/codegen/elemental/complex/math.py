"""Complex transcendental functions: exp, log, sqrt, rsqrt, power, sin, cos, tan, tanh,
expm1, log1p and cbrt, on the principal branches.

Special values follow C99 Annex G (numpy, the interpreter) where it costs a select or two:
sqrt honours the sign of a zero imaginary part, log and sqrt let an infinite part win over a
NaN one, exp/tanh/expm1 keep a zero imaginary part exact on the real axis. c64 runs the
parts' functions through the f32 approximations (vectorizable, a few ulps) and does the
cancellation-prone or overflow-prone steps (|z|^2, sqrt) in f64; c128 uses the same
formulas in f64 with libm (CPU only, like real f64 math).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ....ir import Opcode
from .arith import divide, magnitude, multiply, register
from .values import Cx

INF = math.inf


def _real_axis(cx: Cx, b: ir.Value, im: ir.Value) -> ir.Value:
    """A zero imaginary part of the result where b is zero (on the real axis the function
    is real: no 0 * inf NaN); its sign is b's (a denormal b reads as that zero)."""
    return cx.sel(cx.eq(b, cx.c(0.0)), cx.copysign(cx.c(0.0), b), im)


def _times(cx: Cx, x: ir.Value, y: ir.Value) -> ir.Value:
    """x * y where a zero x stays a (signed) zero even if y is infinite or NaN."""
    return cx.sel(cx.eq(x, cx.c(0.0)), cx.mul(x, cx.copysign(cx.c(1.0), y)), cx.mul(x, y))


# ---- exp, expm1 -----------------------------------------------------------------------------

def _scaled_exp(cx: Cx, x: ir.Value, factors: tuple[ir.Value, ...]) -> list[ir.Value]:
    """exp(x) * f for each factor f, without overflowing where only exp(x) overflows."""
    e = cx.fn("exp", x)
    half = cx.fn("exp", cx.mul(x, cx.c(0.5)))
    big = cx.eq(e, cx.c(INF))
    return [cx.sel(big, cx.mul(cx.mul(half, f), half), cx.mul(e, f)) for f in factors]


def exp(cx: Cx, z: ir.Value) -> ir.Value:
    a, b = cx.parts(z)
    re, im = _scaled_exp(cx, a, (cx.fn("cos", b), cx.fn("sin", b)))
    im = _real_axis(cx, b, im)
    # exp(±inf + i·(inf or NaN)): (±inf, NaN) and (0, 0), not NaN everywhere.
    wild = cx.b.not_(cx.is_finite(b))
    plus, minus = cx.eq(a, cx.c(INF)), cx.eq(a, cx.c(-INF))
    re = cx.sel(cx.b.and_(wild, plus), a, cx.sel(cx.b.and_(wild, minus), cx.c(0.0), re))
    im = cx.sel(cx.b.and_(wild, minus), cx.c(0.0), im)
    return cx.make(re, im)


@register(Opcode.EXP)
def _exp(cx: Cx, instr, v):
    return exp(cx, v[0])


@register(Opcode.EXPM1)
def _expm1(cx: Cx, instr, v):
    a, b = cx.parts(v[0])
    half_sin = cx.fn("sin", cx.mul(b, cx.c(0.5)))
    # e^a cos b - 1 = expm1(a) cos b - 2 sin^2(b/2): no cancellation near 0.
    re = cx.fma(cx.fn("expm1", a), cx.fn("cos", b),
                cx.mul(cx.c(-2.0), cx.mul(half_sin, half_sin)))
    (im,) = _scaled_exp(cx, a, (cx.fn("sin", b),))
    return cx.make(re, _real_axis(cx, b, im))


# ---- log, log1p ------------------------------------------------------------------------------

def log_abs(cx: Cx, a: ir.Value, b: ir.Value, inf_wins: bool = True) -> ir.Value:
    """log|a + ib|: NaN for NaN parts, except that with `inf_wins` an infinite part makes
    it inf even next to a NaN (C99 clog; numpy's log1p formula gives NaN there)."""
    ax, ay = cx.abs(a), cx.abs(b)
    hi, lo = cx.fmax_nan(ax, ay), cx.fmin_nan(ax, ay)
    ratio = cx.div(lo, hi)
    q = cx.sel(cx.eq(hi, cx.c(0.0)), cx.c(0.0), cx.mul(ratio, ratio))
    # log(hi * sqrt(1 + q)) = log(hi) + log1p(q) / 2
    result = cx.fma(cx.fn("log1p", q), cx.c(0.5), cx.fn("log", hi))
    if not cx.is_wide:
        near, value = _near_unit_circle(cx, a, b)
        result = cx.sel(near, value, result)
    result = cx.sel(cx.b.or_(cx.is_inf(a), cx.is_inf(b)), cx.c(INF), result)
    return result if inf_wins else cx.sel(cx.either_nan(a, b), cx.c(math.nan), result)


def _near_unit_circle(cx: Cx, a, b) -> tuple[ir.Value, ir.Value]:
    """c64: where 1/2 < |z|^2 < 2, log|z| = log1p(|z|^2 - 1) / 2 with |z|^2 - 1 exact in f64
    (the far formula loses the low bits of log(hi) + log1p(q)/2 to cancellation there).
    Returns (whether z is there, that value)."""
    w = cx.wide()
    x, y = cx.widen(a), cx.widen(b)
    s = w.fma(x, x, w.mul(y, y))
    value = cx.mul(cx.fn("log1p", cx.narrow(w.sub(s, w.c(1.0)))), cx.c(0.5))
    return cx.b.and_(w.gt(s, w.c(0.5)), w.lt(s, w.c(2.0))), value


def log(cx: Cx, z: ir.Value) -> ir.Value:
    a, b = cx.parts(z)
    return cx.make(log_abs(cx, a, b), cx.fn("atan2", b, a))


@register(Opcode.LOG)
def _log(cx: Cx, instr, v):
    return log(cx, v[0])


@register(Opcode.LOG1P)
def _log1p(cx: Cx, instr, v):
    a, b = cx.parts(v[0])
    a1 = cx.add(a, cx.c(1.0))
    w = cx.wide()
    x, y = cx.widen(a), cx.widen(b)
    # |1 + z|^2 - 1 = a (a + 2) + b^2, accurate where it is small (in f64 for c64).
    u = w.fma(x, w.add(x, w.c(2.0)), w.mul(y, y))
    small = w.lt(w.abs(u), w.c(0.5))
    near = cx.mul(cx.fn("log1p", cx.narrow(u)), cx.c(0.5))
    re = cx.sel(small, near, log_abs(cx, a1, b, inf_wins=False))
    return cx.make(re, cx.fn("atan2", b, a1))


# ---- sqrt, rsqrt, cbrt ---------------------------------------------------------------------------

def _sqrt_wide(cx: Cx, z: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The parts of sqrt(z) in f64 (c64 computes there: one rounding at the end)."""
    a, b = (cx.widen(p) for p in cx.parts(z))
    if not cx.is_wide:  # f32 parts: |z|^2 is exact enough and far from f64's limits
        w = cx.wide()
        return _sqrt_parts(w, a, b, w.sqrt(w.fma(a, a, w.mul(b, b))))
    # c128: scale by a power of 4 so that neither |z| nor its half over/underflows.
    m = cx.fmax_nan(cx.abs(a), cx.abs(b))
    big, tiny = cx.gt(m, cx.c(2.0 ** 1000)), cx.lt(m, cx.c(2.0 ** -900))
    scale_in = cx.sel(big, cx.c(0.25), cx.sel(tiny, cx.c(2.0 ** 200), cx.c(1.0)))
    scale_out = cx.sel(big, cx.c(2.0), cx.sel(tiny, cx.c(2.0 ** -100), cx.c(1.0)))
    a, b = cx.mul(a, scale_in), cx.mul(b, scale_in)
    re, im = _sqrt_parts(cx, a, b, magnitude(cx, cx.make(a, b)))
    return cx.mul(re, scale_out), cx.mul(im, scale_out)


def _sqrt_parts(w: Cx, a, b, hyp) -> tuple[ir.Value, ir.Value]:
    """sqrt(a + ib) from hyp = |a + ib|: t = sqrt((|a| + hyp) / 2) is the larger part."""
    hyp = w.sel(w.b.or_(w.is_inf(a), w.is_inf(b)), w.c(INF), hyp)
    t = w.sqrt(w.fma(w.abs(a), w.c(0.5), w.mul(hyp, w.c(0.5))))
    two_t = w.add(t, t)
    nonneg = w.ge(a, w.c(0.0))
    re = w.sel(nonneg, t, w.div(w.abs(b), two_t))
    im = w.sel(nonneg, w.div(b, two_t), w.copysign(t, b))
    zero = w.b.and_(w.eq(a, w.c(0.0)), w.eq(b, w.c(0.0)))
    re = w.sel(zero, w.c(0.0), re)
    im = w.sel(zero, w.copysign(w.c(0.0), b), im)
    infinite_b = w.is_inf(b)
    return w.sel(infinite_b, w.c(INF), re), w.sel(infinite_b, b, im)


@register(Opcode.SQRT)
def _sqrt(cx: Cx, instr, v):
    re, im = _sqrt_wide(cx, v[0])
    return cx.make(cx.narrow(re), cx.narrow(im))


@register(Opcode.RSQRT)
def _rsqrt(cx: Cx, instr, v):
    w = cx.wide()
    root = w.make(*_sqrt_wide(cx, v[0]))
    re, im = w.parts(divide(w, w.const(1.0, 0.0), root))
    return cx.make(cx.narrow(re), cx.narrow(im))


@register(Opcode.CBRT)
def _cbrt(cx: Cx, instr, v):
    a, b = cx.parts(v[0])
    r = cx.fn("cbrt", magnitude(cx, v[0]))
    angle = cx.mul(cx.fn("atan2", b, a), cx.c(1.0 / 3.0))
    return cx.make(cx.mul(r, cx.fn("cos", angle)), cx.mul(r, cx.fn("sin", angle)))


# ---- power ------------------------------------------------------------------------------------------

@register(Opcode.POWER)
def _power(cx: Cx, instr, v):
    """z^w = exp(w log z); w = 0 gives 1, 0^w is 0 if Re w > 0 and NaN otherwise (numpy's
    rules; numpy also multiplies out small integer powers, which this does not)."""
    z, w = v
    a, b = cx.parts(z)
    c, d = cx.parts(w)
    b_ = cx.b
    result = exp(cx, multiply(cx, w, log(cx, z)))
    zero_base = b_.and_(cx.eq(a, cx.c(0.0)), cx.eq(b, cx.c(0.0)))
    nan = cx.const(math.nan, math.nan)
    at_zero = cx.select(cx.gt(c, cx.c(0.0)), cx.const(0.0, 0.0), nan)
    result = cx.select(zero_base, at_zero, result)
    unit_exponent = b_.and_(cx.eq(c, cx.c(0.0)), cx.eq(d, cx.c(0.0)))
    return cx.select(unit_exponent, cx.const(1.0, 0.0), result)


# ---- trigonometric and hyperbolic ---------------------------------------------------------------

def _cosh_sinh(cx: Cx, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(cosh y, sinh y): expm1 for small |y| (no cancellation), exp(|y|/2)^2 near overflow."""
    ay = cx.abs(y)
    em1 = cx.fn("expm1", ay)
    small_sinh = cx.mul(cx.c(0.5), cx.add(em1, cx.div(em1, cx.add(em1, cx.c(1.0)))))
    e = cx.fn("exp", ay)
    inv = cx.div(cx.c(1.0), e)
    half = cx.fn("exp", cx.mul(ay, cx.c(0.5)))
    huge = cx.mul(cx.mul(half, cx.c(0.5)), half)
    big = cx.eq(e, cx.c(INF))
    cosh = cx.sel(big, huge, cx.mul(cx.c(0.5), cx.add(e, inv)))
    sinh = cx.sel(big, huge, cx.mul(cx.c(0.5), cx.sub(e, inv)))
    sinh = cx.sel(cx.lt(ay, cx.c(1.0)), small_sinh, sinh)
    return cosh, cx.copysign(sinh, y)


@register(Opcode.SIN, Opcode.COS)
def _sin_cos(cx: Cx, instr, v):
    a, b = cx.parts(v[0])
    cosh, sinh = _cosh_sinh(cx, b)
    # sin 0 is an exact zero: on the imaginary axis sin and cos are (0, sinh b), (cosh b, 0).
    sin_a = cx.sel(cx.eq(a, cx.c(0.0)), a, cx.fn("sin", a))
    cos_a = cx.fn("cos", a)
    if instr.opcode == Opcode.SIN:
        z = cx.make(_times(cx, sin_a, cosh), cx.mul(cos_a, sinh))
        far = cx.make(cx.c(math.nan), b)  # C99: sin(inf or NaN + i inf) = (NaN, ±inf)
    else:
        z = cx.make(cx.mul(cos_a, cosh), cx.neg(_times(cx, sin_a, sinh)))
        far = cx.const(INF, math.nan)
    return cx.select(cx.b.and_(cx.is_inf(b), cx.b.not_(cx.is_finite(a))), far, z)


def tanh(cx: Cx, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Kahan's tanh: with t = tan b, s = sinh a, beta = 1 + t^2, rho = sqrt(1 + s^2):
    tanh(a + ib) = (beta rho s + i t) / (1 + beta s^2); far from 0 it is ±1 + tiny i."""
    t = cx.fn("tan", b)
    _, s = _cosh_sinh(cx, a)
    beta = cx.fma(t, t, cx.c(1.0))
    rho = cx.sqrt(cx.fma(s, s, cx.c(1.0)))
    den = cx.fma(cx.mul(beta, s), s, cx.c(1.0))
    re = cx.div(cx.mul(cx.mul(beta, rho), s), den)
    im = cx.div(t, den)
    far = cx.gt(cx.abs(a), cx.c(22.0 if cx.is_wide else 9.0))
    sin_b, cos_b = cx.fn("sin", b), cx.fn("cos", b)
    tail = cx.mul(cx.mul(cx.c(4.0), cx.mul(sin_b, cos_b)), cx.fn("exp", cx.mul(cx.abs(a),
                                                                              cx.c(-2.0))))
    # Far out the real part is ±1 (NaN for a finite a and an infinite or NaN b), the
    # imaginary part 0 for an infinite a.
    defined = cx.b.or_(cx.is_finite(b), cx.is_inf(a))
    re = cx.sel(far, cx.sel(defined, cx.copysign(cx.c(1.0), a), cx.c(math.nan)), re)
    im = cx.sel(far, cx.sel(cx.is_inf(a), cx.c(0.0), tail), im)
    return re, _real_axis(cx, b, im)


@register(Opcode.TANH)
def _tanh(cx: Cx, instr, v):
    return cx.make(*tanh(cx, *cx.parts(v[0])))


@register(Opcode.TAN)
def _tan(cx: Cx, instr, v):
    # tan z = -i tanh(i z), i z = -b + i a
    a, b = cx.parts(v[0])
    u, w = tanh(cx, cx.neg(b), a)
    return cx.make(w, cx.neg(u))
