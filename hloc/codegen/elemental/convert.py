"""convert, bitcast-convert and reduce-precision.

convert follows XLA CPU: float → int truncates, saturates and maps NaN to 0 (LLVM's
fptosi.sat is exactly that); int → int wraps; → pred is "!= 0" (NaN is true); narrow floats
go through f32; f64 → f8/f4 rounds once (round-to-odd to f32 first). Complex: a real
value becomes the real part (imaginary +0), complex → complex converts both parts, complex →
real keeps the real part and complex → pred is "either part != 0" (the interpreter's rules).
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Opcode, PrimitiveType
from . import lowfloat
from .complex import ir as complex_ir
from .registry import emits
from .scalar import finish, operand_type, out_type
from .types import F32, F64, I1, I32, ElemType, elem_type

P = PrimitiveType


def convert_value(ctx, src: ElemType, dst: ElemType, x: ir.Value) -> ir.Value:
    """Convert a register value of type `src` to register type `dst`."""
    b = ctx.builder
    if src.ptype == dst.ptype:
        return x
    if src.is_complex or dst.is_complex:
        return _convert_complex(ctx, src, dst, x)
    if dst.kind == "pred":
        if src.is_float:
            return b.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if src.is_float:
        return _from_float(ctx, src, dst, x)
    signed = src.is_signed
    if dst.is_float:
        target = F64 if dst.bits == 64 else F32
        value = b.sitofp(x, target) if signed else b.uitofp(x, target)
        return finish(ctx, dst, value)
    return _resize_int(b, x, dst.value_type, signed)


def _convert_complex(ctx, src: ElemType, dst: ElemType, x: ir.Value) -> ir.Value:
    b = ctx.builder
    if not src.is_complex:
        re = convert_value(ctx, src, dst.part, x)
        zero = ir.Constant(dst.part.value_type, 0.0)
        return _pair(b, dst, re, zero)
    re, im = complex_ir.parts(b, x)
    if dst.is_complex:
        return _pair(b, dst, convert_value(ctx, src.part, dst.part, re),
                     convert_value(ctx, src.part, dst.part, im))
    if dst.kind == "pred":
        zero = ir.Constant(re.type, 0.0)
        return b.or_(b.fcmp_unordered("!=", re, zero), b.fcmp_unordered("!=", im, zero))
    return convert_value(ctx, src.part, dst, re)


def _pair(b, et: ElemType, re: ir.Value, im: ir.Value) -> ir.Value:
    return complex_ir.pair(b, et.value_type, re, im)


def _resize_int(b, x, ty: ir.IntType, signed: bool) -> ir.Value:
    if x.type.width == ty.width:
        return x
    if x.type.width > ty.width:
        return b.trunc(x, ty)
    return b.sext(x, ty) if signed else b.zext(x, ty)


def _from_float(ctx, src: ElemType, dst: ElemType, x: ir.Value) -> ir.Value:
    b = ctx.builder
    if dst.is_integral:
        return saturating_to_int(ctx, dst, x)
    if dst.bits == 64:
        return b.fpext(x, F64)
    if x.type == F64:
        if dst.is_narrow_float and dst.bits <= 8:
            x = _round_to_odd_f32(ctx, x)
        else:
            x = b.fptrunc(x, F32)
    return finish(ctx, dst, x)


def saturating_to_int(ctx, dst: ElemType, x: ir.Value) -> ir.Value:
    """Truncate toward zero, saturate at dst's limits, NaN → 0 (LLVM's fptosi.sat semantics,
    written out because LLVM scalarizes the intrinsic on x86 and this form vectorizes)."""
    b = ctx.builder
    lo = -(1 << (dst.bits - 1)) if dst.is_signed else 0
    hi = (1 << (dst.bits - 1)) - 1 if dst.is_signed else (1 << dst.bits) - 1
    lo_f, hi_f = ir.Constant(x.type, float(lo)), ir.Constant(x.type, float(hi + 1))
    inside = b.and_(b.fcmp_ordered(">", x, lo_f), b.fcmp_ordered("<", x, hi_f))
    safe = b.select(inside, x, ir.Constant(x.type, 0.0))
    value = b.fptosi(safe, dst.value_type) if dst.is_signed else b.fptoui(safe, dst.value_type)
    value = b.select(b.fcmp_ordered("<=", x, lo_f), ir.Constant(dst.value_type, lo), value)
    return b.select(b.fcmp_ordered(">=", x, hi_f),
                    ir.Constant(dst.value_type, hi & ((1 << dst.bits) - 1)), value)


def _round_to_odd_f32(ctx, x: ir.Value) -> ir.Value:
    """f64 → f32 rounding to odd: a later rounding to a narrower type is then exact (once)."""
    b = ctx.builder
    near = b.fptrunc(x, F32)
    back = b.fpext(near, F64)
    inexact = b.fcmp_ordered("!=", back, x)
    finite = b.fcmp_ordered("<", ctx.call("llvm.fabs.f64", [x]), ir.Constant(F64, float("inf")))
    inexact = b.and_(inexact, finite)
    overshoot = b.fcmp_ordered(">", ctx.call("llvm.fabs.f64", [back]),
                               ctx.call("llvm.fabs.f64", [x]))
    bits = b.bitcast(near, I32)
    # Truncate toward zero (one step down in magnitude is bits - 1), then force the low bit.
    toward_zero = b.select(b.and_(inexact, overshoot), b.sub(bits, ir.Constant(I32, 1)), bits)
    odd = b.or_(toward_zero, b.zext(inexact, I32))
    return b.bitcast(odd, F32)


@emits(Opcode.CONVERT)
def convert(ctx, instr, gens):
    src, dst = operand_type(instr), out_type(instr)
    (gen,) = gens

    def generate(index):
        return convert_value(ctx, src, dst, gen(index))

    return generate


# ---- bitcast-convert -----------------------------------------------------------------------------

def storage_bits(et: ElemType) -> int:
    if et.is_complex:
        raise UnsupportedError("bitcast-convert of complex numbers has no lowering")
    return 8 if et.kind == "pred" else et.bits


def to_bits(ctx, et: ElemType, x: ir.Value) -> ir.Value:
    """A register value's bit pattern as an integer of its storage width."""
    storage_bits(et)  # complex: UnsupportedError
    b = ctx.builder
    if et.kind == "pred":
        return b.zext(x, ir.IntType(8))
    if et.is_narrow_float:
        raw = lowfloat.encode(ctx, et, x)
        return b.trunc(raw, ir.IntType(et.bits)) if et.bits < raw.type.width else raw
    if et.is_float:
        return b.bitcast(x, ir.IntType(et.bits))
    return x


def from_bits(ctx, et: ElemType, bits: ir.Value) -> ir.Value:
    b = ctx.builder
    if et.kind == "pred":
        return b.trunc(bits, I1)
    if et.is_narrow_float:
        raw = b.zext(bits, et.storage_type) if bits.type.width < et.storage_type.width else bits
        return lowfloat.decode(ctx, et, raw)
    if et.is_float:
        return b.bitcast(bits, et.value_type)
    return bits


@emits(Opcode.BITCAST_CONVERT)
def bitcast_convert(ctx, instr, gens):
    src, dst = operand_type(instr), out_type(instr)
    sbits, dbits = storage_bits(src), storage_bits(dst)
    (gen,) = gens
    b = ctx.builder
    if sbits == dbits:
        return lambda index: from_bits(ctx, dst, to_bits(ctx, src, gen(index)))
    if sbits > dbits:
        def split(index):
            wide = to_bits(ctx, src, gen(index[:-1]))
            shift = b.mul(index[-1], ctx.i64(dbits))
            shift = b.trunc(shift, ir.IntType(sbits)) if sbits < 64 else shift
            return from_bits(ctx, dst, b.trunc(b.lshr(wide, shift), ir.IntType(dbits)))
        return split
    ratio = dbits // sbits

    def join(index):
        acc = ir.Constant(ir.IntType(dbits), 0)
        for k in range(ratio):
            part = b.zext(to_bits(ctx, src, gen(list(index) + [ctx.i64(k)])), ir.IntType(dbits))
            acc = b.or_(acc, b.shl(part, ir.Constant(ir.IntType(dbits), k * sbits)))
        return from_bits(ctx, dst, acc)

    return join


# ---- reduce-precision ------------------------------------------------------------------------------

_MANTISSA = {P.F16: 10, P.BF16: 7, P.F32: 23, P.F64: 52}


def reduce_precision_bits(b, u: ir.Value, src_m: int, exponent_bits: int, mantissa_bits: int):
    """Round bit pattern u (a float of width u.type.width, src_m mantissa bits) to (e, m)."""
    ty = u.type
    nbits = ty.width
    src_e = nbits - 1 - src_m
    c = lambda v: ir.Constant(ty, v)  # noqa: E731
    sign_mask = 1 << (nbits - 1)
    exp_mask = ((1 << src_e) - 1) << src_m
    if mantissa_bits < src_m:
        dropped = src_m - mantissa_bits
        last_bit = b.and_(b.lshr(u, c(dropped)), c(1))
        bias = b.add(last_bit, c((1 << (dropped - 1)) - 1))
        u = b.and_(b.add(u, bias), c(((1 << nbits) - 1) & ~((1 << dropped) - 1)))
    if exponent_bits < src_e:
        bias = (1 << (src_e - 1)) - 1
        reduced = (1 << (exponent_bits - 1)) - 1
        exponent = b.and_(u, c(exp_mask))
        signed_zero = b.and_(u, c(sign_mask))
        signed_inf = b.or_(signed_zero, c(exp_mask))
        u = b.select(b.icmp_unsigned(">", exponent, c((bias + reduced) << src_m)), signed_inf, u)
        u = b.select(b.icmp_unsigned("<=", exponent, c((bias - reduced) << src_m)), signed_zero, u)
    return u


@emits(Opcode.REDUCE_PRECISION)
def reduce_precision(ctx, instr, gens):
    et = operand_type(instr)
    if not et.is_float:
        raise UnsupportedError(f"reduce-precision %{instr.name} needs a float operand")
    e, m = instr.attrs.exponent_bits, instr.attrs.mantissa_bits
    work = et if et.ptype in _MANTISSA else elem_type(P.F32)
    (gen,) = gens
    b = ctx.builder

    def generate(index):
        x = gen(index)
        u = to_bits(ctx, work, x)
        rounded = from_bits(ctx, work, reduce_precision_bits(b, u, _MANTISSA[work.ptype], e, m))
        nan = b.fcmp_unordered("uno", x, x)
        return finish(ctx, et, b.select(nan, x, rounded))

    return generate

