"""Transcendental, root and rounding lowerings.

f32 (and the narrow floats, computed in f32) use the vectorizable approximations of
approx.py. f64 uses the libm-free implementations of fmath64*.py (within 1 ulp; what CUDA
kernels run), read with XLA CPU's flush-to-zero rules for denormal operands. The CPU target
overrides f64 with what XLA CPU computes (see _cpu_math below): its own rational
approximations for exp, tanh and log1p and its expm1 built on them (vectorizable: exp and
tanh of 1M values went from 4.8 and 15.3 ms to 1.0 ms, XLA's time, and bit for bit XLA's
results where glibc's differed in 14% and 61% of them), libm for the trigonometric functions,
log, atan2 and pow; erf and cbrt, where XLA calls libm, take fmath64's (see _FMATH64_ON_CPU).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Opcode, PrimitiveType
from . import approx, lowfloat
from .registry import emits, generic_lowering
from .scalar import elementwise, exact_unary, unary_float
from .types import F64, elem_type

_F32_UNARY = {
    Opcode.EXP: approx.exp_f32,
    Opcode.EXPM1: approx.expm1_f32,
    Opcode.LOG: approx.log_f32,
    Opcode.LOG1P: approx.log1p_f32,
    Opcode.SIN: approx.sin_f32,
    Opcode.COS: approx.cos_f32,
    Opcode.TAN: approx.tan_f32,
    Opcode.TANH: approx.tanh_f32,
    Opcode.LOGISTIC: approx.logistic_f32,
    Opcode.ERF: approx.erf_f32,
    Opcode.CBRT: approx.cbrt_f32,
}

# f64 without libm: (fmath64 module, function). Imported on first use: the CPU target calls
# libm for f64 instead (cpu_math below), and the modules cost a compile ~10 ms to import.
_F64_UNARY = {
    Opcode.EXP: ("core", "exp_f64"),
    Opcode.EXPM1: ("core", "expm1_f64"),
    Opcode.LOG: ("log", "log_f64"),
    Opcode.LOG1P: ("log", "log1p_f64"),
    Opcode.SIN: ("trig", "sin_f64"),
    Opcode.COS: ("trig", "cos_f64"),
    Opcode.TAN: ("trig", "tan_f64"),
    Opcode.TANH: ("core", "tanh_f64"),
    Opcode.LOGISTIC: ("core", "logistic_f64"),
    Opcode.ERF: ("erf", "erf_f64"),
    Opcode.CBRT: ("log", "cbrt_f64"),
}


def _fmath64(module: str, name: str):
    """Function `name` of fmath64/`module`.py."""
    return getattr(__import__(f"{__package__}.fmath64.{module}", fromlist=[name]), name)


# XLA CPU's expm1/sin/tan/tanh return a denormal operand unchanged (a small-argument
# shortcut), where the other functions read it as zero; its f32 cbrt maps every denormal to
# one fixed value. Mirrored so results match XLA bit for bit there too.
TINY_IS_IDENTITY = frozenset({Opcode.EXPM1, Opcode.SIN, Opcode.TAN, Opcode.TANH})
_CBRT_OF_F32_DENORMAL = -5.595173467040467e-16  # f32 bits 0xA6217D18


def is_denormal(ctx, x: ir.Value) -> ir.Value:
    """Nonzero bit patterns below the smallest normal (what DAZ reads as zero)."""
    m = approx.FMath(ctx, x.type)
    b = ctx.builder
    tiny = 2.2250738585072014e-308 if x.type == F64 else 1.1754943508222875e-38
    nonzero = b.icmp_unsigned("!=", b.shl(m.bits(x), m.ic(1)), m.ic(0))
    return b.and_(m.lt(m.abs(x), m.c(tiny)), nonzero)


def denormal_quirks(ctx, opcode: Opcode, x: ir.Value, result: ir.Value) -> ir.Value:
    b = ctx.builder
    if opcode in TINY_IS_IDENTITY and not (opcode == Opcode.TANH and x.type == F64):
        return b.select(is_denormal(ctx, x), x, result)
    if opcode == Opcode.CBRT and x.type != F64:
        return b.select(is_denormal(ctx, x), ir.Constant(x.type, _CBRT_OF_F32_DENORMAL), result)
    return result


def unary_f64(ctx, opcode: Opcode, x: ir.Value) -> ir.Value:
    """The target-neutral f64 `opcode` of x, denormals read as XLA CPU reads them."""
    where = _F64_UNARY.get(opcode)
    if where is None:
        raise UnsupportedError(f"{opcode.value} has no f64 lowering")
    fn = _fmath64(*where)
    m = approx.FMath(ctx, F64)
    return denormal_quirks(ctx, opcode, x, fn(ctx, m.daz(x)))


def _unary_math(fn):
    def rule(ctx, instr, v, et):
        if v[0].type == F64:
            return unary_f64(ctx, instr.opcode, v[0])
        return denormal_quirks(ctx, instr.opcode, v[0], fn(ctx, v[0]))
    return rule


for _op, _fn in _F32_UNARY.items():
    if _op != Opcode.LOGISTIC:
        emits(_op)(elementwise({"float": _unary_math(_fn)}))


def _logistic(ctx, instr, v, et):
    x = v[0]
    if x.type == F64:
        return unary_f64(ctx, Opcode.LOGISTIC, x)
    if et.ptype != PrimitiveType.F16:
        return approx.logistic_f32(ctx, x)
    # XLA CPU expands f16 logistic into 1 / (1 + exp(-x)) with every step rounded to f16.
    b = ctx.builder
    one = ir.Constant(x.type, 1.0)
    e = lowfloat.round_to(ctx, et, approx.exp_f32(ctx, b.fneg(x)))
    return b.fdiv(one, lowfloat.round_to(ctx, et, b.fadd(one, e)))


emits(Opcode.LOGISTIC)(elementwise({"float": _logistic}))


def _sqrt(ctx, instr, v, et):
    return exact_unary(ctx, "sqrt", v[0])


def _rsqrt(ctx, instr, v, et):
    return ctx.builder.fdiv(ir.Constant(v[0].type, 1.0), unary_float(ctx, "sqrt", v[0]))


emits(Opcode.SQRT)(elementwise({"float": _sqrt}))
emits(Opcode.RSQRT)(elementwise({"float": _rsqrt}))

for _op, _name in {Opcode.FLOOR: "floor", Opcode.CEIL: "ceil",
                   Opcode.ROUND_NEAREST_EVEN: "roundeven", Opcode.ROUND_NEAREST_AFZ: "round"}.items():
    emits(_op)(elementwise({"float": (lambda name: lambda ctx, i, v, et:
                                      exact_unary(ctx, name, v[0]))(_name)}))


def _atan2(ctx, instr, v, et):
    if v[0].type == F64:
        return atan2_f64_xla(ctx, *v)
    return approx.atan2_f32(ctx, *v)


def atan2_f64_xla(ctx, y, x, core=None):
    """atan2 with XLA CPU's denormal rules (measured, see the interpreter's libm.atan2): a
    denormal y gives -pi against a negative normal x whatever its sign, and ±pi/2 against a
    zero or denormal x; a denormal x acts as zero (see _atan2_f64). `core(ctx, y, x)`: the
    atan2 of flushed operands, fmath64's by default (the CPU's is libm's)."""
    m = approx.FMath(ctx, F64)
    b = ctx.builder
    res = _atan2_f64(ctx, y, x, core or _fmath64("atan", "atan2_f64"))
    y_den = is_denormal(ctx, y)
    x_zero = m.lt(m.abs(x), m.c(2.2250738585072014e-308))
    normal_x = b.and_(m.lt(m.abs(x), m.c(float("inf"))), b.not_(x_zero))
    res = m.sel(b.and_(y_den, b.and_(m.lt(x, m.c(0.0)), normal_x)), m.c(-math.pi), res)
    return m.sel(b.and_(y_den, x_zero), m.copysign(m.c(math.pi / 2), y), res)


emits(Opcode.ATAN2)(elementwise({"float": _atan2}))


def float_power(ctx, instr, v, et):
    """The float rule of `power` (integer power lives in arith.py)."""
    if v[0].type == F64:
        return _fmath64("log", "pow_f64")(ctx, *v, xla_denormal_base=True)
    return approx.pow_f32(ctx, *v)


# ---- CPU: f64 as XLA CPU computes it: its own exp, tanh, log1p, expm1; libm for the rest -----

# log, sin, cos, tan, atan2 and pow go through LLVM's intrinsics, which the backend lowers to
# the same libm calls: a loop around one vectorizes (llvm.sin.v8f64: one call per lane, the
# rest of the body in vectors), where a call to `sin` itself, which may set errno, kept the
# whole loop scalar, XLA's exp in it too (exp(-x*x)*sin(3x) over 1M doubles: 14 -> 8 ms).
# XLA CPU's loops take them the same way. A sin and a cos of one value become one `sincos`
# call, glibc's, which returns what its sin and cos do (tests/test_xla_numerics.py).
LOG_F64 = "llvm.log.f64"
_LIBM = {Opcode.LOG: LOG_F64, Opcode.SIN: "llvm.sin.f64", Opcode.COS: "llvm.cos.f64",
         Opcode.TAN: "llvm.tan.f64", Opcode.ATAN2: "llvm.atan2.f64", Opcode.POWER: "llvm.pow.f64"}

# erf and cbrt: XLA CPU calls glibc's, one scalar call per element; fmath64's are branch-free
# vector code and at least as close (over 512k values in [-3, 3], against 120-bit references:
# erf within 0.72 ulp where glibc's is within 0.80; cbrt correctly rounded where glibc's is
# 3.2 ulp out). f64_special (held-out, 512k doubles, 2 Zen 4 cores): erf 5.5 -> 2.4 ms, cbrt
# 5.3 -> 0.7 ms. Results may differ from XLA's by the last bit.
_FMATH64_ON_CPU = frozenset({Opcode.ERF, Opcode.CBRT})


# XLA CPU's f64 tanh (xla/codegen/intrinsic/tanh.cc, after Eigen's ptanh_double): x clamped
# to +-17.714196154005176, x * P(x^2) / Q(x^2) by Horner's rule with contracted multiply-adds,
# +-1 from |x| >= 20, NaN kept. Bit for bit what jax 0.10.2's XLA returns on 700k values
# (denormals read as zero: no denormal shortcut), where glibc's tanh differed in 91% of them.
_TANH_F64_P = (2.6158007860482230e-23, 7.6534862268749319e-19, 3.1309488231386680e-15,
               4.2303918148209176e-12, 2.4618379131293676e-09, 6.8644367682497074e-07,
               9.3839087674268880e-05, 5.9809711724441161e-03, 1.5184719640284322e-01, 1.0)
_TANH_F64_Q = (6.463747022670968018e-21, 5.782506856739003571e-17, 1.293019623712687916e-13,
               1.123643448069621992e-10, 4.492975677839633985e-08, 8.785185266237658698e-06,
               8.295161192716231542e-04, 3.437448108450402717e-02, 4.851805297361760360e-01,
               1.0)


def xla_tanh_f64(ctx, x: ir.Value) -> ir.Value:
    """tanh as XLA CPU computes it in f64: vectorizable, and its bits."""
    m = approx.FMath(ctx, F64)
    clamp = 17.714196154005176
    xc = m.intrinsic("minnum", m.intrinsic("maxnum", x, m.c(-clamp)), m.c(clamp))
    x2 = m.mul(xc, xc)
    # The coefficients run from the leading one; FMath.poly takes the constant term first.
    result = m.div(m.mul(xc, m.poly(x2, _TANH_F64_P[::-1])), m.poly(x2, _TANH_F64_Q[::-1]))
    b = ctx.builder
    result = b.select(b.fcmp_ordered(">=", m.abs(x), m.c(20.0)), m.copysign(m.c(1.0), x), result)
    return b.select(b.fcmp_unordered("uno", x, x), x, result)  # the clamp would lose a NaN


def xla_expm1_f64(ctx, x: ir.Value) -> ir.Value:
    """expm1 as XLA CPU computes it in f64 (its elemental emitter): exp(x) - 1 where |x| >
    1/2, else tanh(x/2) (exp(x) + 1), and x itself where x/2 is zero (a denormal x under
    flush-to-zero): its tanh and exp, so vectorizable, and its bits (512k values in [-3, 3]:
    every one, where glibc's expm1 differed in the last place)."""
    m, b = approx.FMath(ctx, F64), ctx.builder
    half = m.mul(x, m.c(0.5))
    e = xla_exp_f64(ctx, x)
    near_zero = m.mul(xla_tanh_f64(ctx, half), m.add(e, m.c(1.0)))
    result = m.sel(b.fcmp_ordered(">", m.abs(x), m.c(0.5)), m.sub(e, m.c(1.0)), near_zero)
    return m.sel(b.fcmp_ordered("==", half, m.c(0.0)), x, result)


def xla_exp_f64(ctx, x: ir.Value) -> ir.Value:
    """exp as XLA CPU computes it in f64 (xla/codegen/intrinsic/exp.cc, Cephes' rational
    form as in Eigen): x clamped to [-708.396..., 709.782...], n = floor(x log2(e) + 1/2),
    g = x - n ln2 (ln2 in two parts), exp(g) = 1 + 2 g P(g^2) / (Q(g^2) - g P(g^2)), scaled
    by 2^n as Eigen's ldexp does (four factors); 0 below the range, inf above. Multiply-adds
    fuse where XLA's do (its LLVM contracts them: a product with one use)."""
    m, b = approx.FMath(ctx, F64), ctx.builder
    lo, hi = -708.3964185322641, 709.782712893384
    xc = m.intrinsic("maximum", m.intrinsic("minimum", x, m.c(hi)), m.c(lo))
    n = m.intrinsic("floor", m.fma(xc, m.c(1.4426950408889634073599), m.c(0.5)))
    neg_n = b.fneg(n)
    g = m.fma(neg_n, m.c(1.42860682030941723212e-6), m.fma(neg_n, m.c(0.693145751953125), xc))
    g2 = m.mul(g, g)
    p = m.mul(m.poly(g2, (9.99999999999999999910e-1, 3.02994407707441961300e-2,
                          1.26177193074810590878e-4)), g)
    q = m.poly(g2, (2.00000000000000000009e0, 2.27265548208155028766e-1,
                    2.52448340349684104192e-3, 3.00198505138664455042e-6))
    e_g = m.fma(m.div(p, m.sub(q, p)), m.c(2.0), m.c(1.0))
    # ldexp(e_g, n): n clamped to +-2099, then 2^floor(n/4) three times and the rest once.
    k = m.to_int(n)
    k = ctx.call("llvm.smin.i64", [ctx.call("llvm.smax.i64", [k, m.ic(-2099)]), m.ic(2099)])
    quarter = b.ashr(k, m.ic(2))
    c = m.pow2(quarter)
    scaled = m.mul(m.mul(m.mul(m.mul(e_g, c), c), c), m.pow2(b.sub(k, b.mul(quarter, m.ic(3)))))
    result = b.select(m.lt(x, m.c(lo)), m.c(0.0), scaled)
    return b.select(b.fcmp_ordered(">", x, m.c(hi)), m.c(float("inf")), result)


# XLA CPU's f64 log1p (xla/codegen/intrinsic/log1p.cc, Cephes' rational form): for
# |x| < sqrt(2) - 1, x - x^2/2 + x^3 N(x)/D(x); else log(x + 1) (libm's log).
_LOG1P_F64_N = (4.5270000862445199635215E-5, 4.9854102823193375972212E-1,
                6.5787325942061044846969E0, 2.9911919328553073277375E1,
                6.0949667980987787057556E1, 5.7112963590585538103336E1,
                2.0039553499201281259648E1)
_LOG1P_F64_D = (1.0, 1.5062909083469192043167E1, 8.3047565967967209469434E1,
                2.2176239823732856465394E2, 3.0909872225312059774938E2,
                2.1642788614495947685003E2, 6.0118660497603843919306E1)


def xla_log1p_f64(ctx, x: ir.Value) -> ir.Value:
    """log1p as XLA CPU computes it in f64 (up to 128 ulp from glibc's log1p near the
    threshold, where it takes log(x + 1))."""
    m, b = approx.FMath(ctx, F64), ctx.builder
    x2 = m.mul(x, x)
    # The coefficients run from the leading one; FMath.poly takes the constant term first.
    small = m.mul(m.mul(x, x2), m.div(m.poly(x, _LOG1P_F64_N[::-1]), m.poly(x, _LOG1P_F64_D[::-1])))
    small = m.add(x, m.add(m.mul(m.c(-0.5), x2), small))
    is_small = m.lt(m.abs(x), m.c(0.41421356237309504880))
    # libm's log only where it is taken: a call per element made a scalar softplus 2x
    # slower. (LLVM's vectorizer still if-converts the branch: the intrinsic is speculatable.)
    before = b.block
    with b.if_then(b.not_(is_small)):
        large = ctx.call(LOG_F64, [m.add(x, m.c(1.0))])
        large_block = b.block
    result = b.phi(F64)
    result.add_incoming(small, before)
    result.add_incoming(large, large_block)
    return result


def _cpu_f64(opcode: Opcode):
    """The CPU's f64 rule of `opcode`."""
    name = _LIBM.get(opcode)

    def rule(ctx, instr, v, et):
        b = ctx.builder
        m = approx.FMath(ctx, F64)
        if opcode == Opcode.TANH:
            return xla_tanh_f64(ctx, v[0])
        if opcode == Opcode.EXP:
            return xla_exp_f64(ctx, v[0])
        if opcode == Opcode.EXPM1:
            return xla_expm1_f64(ctx, v[0])
        if opcode == Opcode.LOG1P:
            return xla_log1p_f64(ctx, m.daz(v[0]))
        if opcode in _FMATH64_ON_CPU:
            return unary_f64(ctx, opcode, v[0])
        if opcode == Opcode.LOGISTIC:  # 1 / (1 + exp(-x)), XLA's logistic expansion
            one = ir.Constant(F64, 1.0)
            return b.fdiv(one, b.fadd(one, xla_exp_f64(ctx, b.fneg(m.daz(v[0])))))
        if opcode == Opcode.POWER:
            return ctx.call(name, list(v))  # glibc pow under DAZ is what XLA CPU computes
        if opcode == Opcode.ATAN2:
            return atan2_f64_xla(ctx, *v, lambda c, y, x: c.call(name, [y, x]))
        x = m.daz(v[0])  # libm tests bits itself: give it the zero DAZ would read
        return denormal_quirks(ctx, opcode, v[0], ctx.call(name, [x]))
    return rule


def _atan2_f64(ctx, y, x, atan2):
    """atan2(ctx, y, x) (libm's or fmath64's) on flushed operands, except that a denormal x
    with a nonzero finite y gives ±pi/2 (libm's own zero test sees the denormal)."""
    m = approx.FMath(ctx, F64)
    b = ctx.builder
    res = atan2(ctx, m.daz(y), m.daz(x))
    y_nonzero = b.icmp_unsigned("!=", b.shl(m.bits(y), m.ic(1)), m.ic(0))
    vertical = b.and_(is_denormal(ctx, x), b.and_(y_nonzero, m.lt(m.abs(y), m.c(float("inf")))))
    return b.select(vertical, m.copysign(m.c(1.5707963267948966), y), res)


def _cpu_math(opcode: Opcode):
    from .arith import int_power

    f64_lowering = elementwise({"float": _cpu_f64(opcode), "integral": int_power})

    def lowering(ctx, instr, gens):
        if elem_type(instr.operands[0].shape.element_type).ptype == PrimitiveType.F64:
            return f64_lowering(ctx, instr, gens)
        return generic_lowering(opcode)(ctx, instr, gens)

    return lowering


for _op in (*_LIBM, *_FMATH64_ON_CPU, Opcode.EXP, Opcode.EXPM1, Opcode.LOG1P, Opcode.TANH,
            Opcode.LOGISTIC):
    emits(_op, target="cpu")(_cpu_math(_op))
