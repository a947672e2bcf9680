"""Transcendental, root and rounding lowerings.

f32 (and the narrow floats, computed in f32) use the vectorizable approximations of
approx.py. f64 uses the libm-free implementations of fmath64*.py (within 1 ulp; what CUDA
kernels run), read with XLA CPU's flush-to-zero rules for denormal operands. The CPU target
overrides f64 with libm calls instead (see cpu_math below: vectorized loops do not matter
for f64 math there, and its results stay those of XLA CPU).
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


def atan2_f64_xla(ctx, y, x):
    """fmath64's atan2 with XLA CPU's denormal rules (measured, see the interpreter's
    libm.atan2): a denormal y gives -pi against a negative normal x whatever its sign, and
    ±pi/2 against a zero or denormal x; a denormal x acts as zero (see _atan2_f64)."""
    m = approx.FMath(ctx, F64)
    b = ctx.builder
    res = _atan2_f64(ctx, y, x, _fmath64("atan", "atan2_f64"))
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


# ---- CPU: f64 through libm -----------------------------------------------------------------------

_LIBM = {Opcode.EXP: "exp", Opcode.EXPM1: "expm1", Opcode.LOG: "log", Opcode.LOG1P: "log1p",
         Opcode.SIN: "sin", Opcode.COS: "cos", Opcode.TAN: "tan", Opcode.TANH: "tanh",
         Opcode.ERF: "erf", Opcode.CBRT: "cbrt", Opcode.ATAN2: "atan2", Opcode.POWER: "pow",
         Opcode.LOGISTIC: "exp"}


def _libm_f64(opcode: Opcode):
    name = _LIBM[opcode]

    def rule(ctx, instr, v, et):
        b = ctx.builder
        m = approx.FMath(ctx, F64)
        if opcode == Opcode.POWER:
            return ctx.call(name, list(v))  # glibc pow under DAZ is what XLA CPU computes
        if opcode == Opcode.ATAN2:
            return _atan2_f64(ctx, *v, lambda c, y, x: c.call("atan2", [y, x]))
        x = m.daz(v[0])  # libm tests bits itself: give it the zero DAZ would read
        if opcode == Opcode.LOGISTIC:
            one = ir.Constant(F64, 1.0)
            return b.fdiv(one, b.fadd(one, ctx.call(name, [b.fneg(x)])))
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

    f64_lowering = elementwise({"float": _libm_f64(opcode), "integral": int_power})

    def lowering(ctx, instr, gens):
        if elem_type(instr.operands[0].shape.element_type).ptype == PrimitiveType.F64:
            return f64_lowering(ctx, instr, gens)
        return generic_lowering(opcode)(ctx, instr, gens)

    return lowering


for _op in _LIBM:
    emits(_op, target="cpu")(_cpu_math(_op))
