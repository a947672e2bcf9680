"""Narrow floats (bf16, f16, f8*, f4*): bits <-> f32 conversions with integer operations.

f32 → narrow rounds to nearest even, as ml_dtypes and XLA do: denormal results are kept,
overflow gives inf (IEEE formats), NaN (the "fn"/"fnuz" formats) or the largest value
(f4e2m1fn). Decoding f8/f4 is a table lookup (exact by construction); f16 uses the hardware
conversion when the target has one.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import PrimitiveType, dtypes
from ...util.record import dataclass
from . import nanbits
from .types import F32, I32, ElemType

P = PrimitiveType


@dataclass(frozen=True)
class NarrowFormat:
    """Bit layout of a narrow float: exponent/mantissa widths, bias and special values."""

    exp_bits: int
    man_bits: int
    bias: int
    style: str  # "ieee" (inf + NaNs), "fn" (no inf, S.1..1 NaN), "fnuz" (NaN = 0x80), "sat"

    @property
    def sign_shift(self) -> int:
        return self.exp_bits + self.man_bits

    @property
    def max_code(self) -> int:
        """The largest finite magnitude's code."""
        all_ones = (1 << self.sign_shift) - 1
        if self.style == "ieee":
            return (((1 << self.exp_bits) - 1) << self.man_bits) - 1
        if self.style == "fn":
            return all_ones - 1
        return all_ones


FORMATS: dict[PrimitiveType, NarrowFormat] = {
    P.F16: NarrowFormat(5, 10, 15, "ieee"),
    P.BF16: NarrowFormat(8, 7, 127, "ieee"),
    P.F8E5M2: NarrowFormat(5, 2, 15, "ieee"),
    P.F8E4M3: NarrowFormat(4, 3, 7, "ieee"),
    P.F8E3M4: NarrowFormat(3, 4, 3, "ieee"),
    P.F8E4M3FN: NarrowFormat(4, 3, 7, "fn"),
    P.F8E4M3FNUZ: NarrowFormat(4, 3, 8, "fnuz"),
    P.F8E4M3B11FNUZ: NarrowFormat(4, 3, 11, "fnuz"),
    P.F8E5M2FNUZ: NarrowFormat(5, 2, 16, "fnuz"),
    P.F4E2M1FN: NarrowFormat(2, 1, 1, "sat"),
}


def _c(ty, v) -> ir.Constant:
    return ir.Constant(ty, v)


# ---- decode: storage bits → f32 ---------------------------------------------------------------

def decode(ctx, et: ElemType, raw: ir.Value) -> ir.Value:
    """Storage bits (i8/i16) of a narrow float → its exact f32 value."""
    b = ctx.builder
    if et.ptype == P.BF16:
        wide = b.shl(b.zext(raw, I32), _c(I32, 16))
        return b.bitcast(wide, F32)
    if et.ptype == P.F16:
        return _decode_ieee(ctx, FORMATS[P.F16], raw)
    return _decode_table(ctx, et, raw)


def _decode_table(ctx, et: ElemType, raw: ir.Value) -> ir.Value:
    import numpy as np

    b = ctx.builder
    count = 1 << dtypes.info(et.ptype).bits
    values = np.arange(count, dtype=np.uint8).view(dtypes.to_numpy(et.ptype)).astype(np.float32)
    table = ctx.table(("decode", et.ptype), F32, [float(v) for v in values])
    mask = _c(raw.type, count - 1)
    index = b.zext(b.and_(raw, mask), ir.IntType(64))
    ptr = b.gep(table, [_c(ir.IntType(64), 0), index], inbounds=True,
                source_etype=table.value_type)
    return b.load(ptr, typ=F32)


def _decode_ieee(ctx, fmt: NarrowFormat, raw: ir.Value) -> ir.Value:
    """IEEE-style narrow float bits → f32 with integer ops (f16 without hardware support)."""
    b = ctx.builder
    x = b.zext(raw, I32)
    m, e = fmt.man_bits, fmt.exp_bits
    sign = b.shl(b.lshr(x, _c(I32, fmt.sign_shift)), _c(I32, 31))
    mant = b.and_(x, _c(I32, (1 << m) - 1))
    expo = b.and_(b.lshr(x, _c(I32, m)), _c(I32, (1 << e) - 1))
    # Normal numbers: rebias the exponent; all-ones exponent: inf/NaN with the payload kept.
    rebias = b.add(expo, _c(I32, 127 - fmt.bias))
    is_special = b.icmp_unsigned("==", expo, _c(I32, (1 << e) - 1))
    f32_exp = b.select(is_special, _c(I32, 255), rebias)
    normal = b.or_(b.shl(f32_exp, _c(I32, 23)), b.shl(mant, _c(I32, 23 - m)))
    # Subnormals: mantissa * 2**(1 - bias - m), exact in f32.
    scale = 2.0 ** (1 - fmt.bias - m)
    sub = b.fmul(b.uitofp(mant, F32), _c(F32, scale))
    sub_bits = b.bitcast(sub, I32)
    is_sub = b.icmp_unsigned("==", expo, _c(I32, 0))
    magnitude = b.select(is_sub, sub_bits, normal)
    return b.bitcast(b.or_(magnitude, sign), F32)


# ---- encode: f32 → storage bits -----------------------------------------------------------------

def encode(ctx, et: ElemType, value: ir.Value) -> ir.Value:
    """An f32 value rounded to nearest even into the narrow type's storage bits."""
    b = ctx.builder
    if et.ptype == P.BF16:
        return b.trunc(b.lshr(_bf16_round_bits(ctx, value), _c(I32, 16)), et.storage_type)
    if et.ptype == P.F16 and ctx.native_half:
        bits = nanbits.float_bits(ctx, value)
        sign = b.lshr(b.and_(bits, _c(I32, 0x80000000)), _c(I32, 16))
        payload = b.lshr(b.and_(_nan_bits(b, bits), _c(I32, 0x007FFFFF)), _c(I32, 13))
        code = b.or_(sign, b.or_(_c(I32, 0x7C00), payload))
        nan = b.trunc(code, et.storage_type)
        return b.select(is_nan(b, value), nan,
                        b.bitcast(b.fptrunc(value, ir.HalfType()), et.storage_type))
    return _encode_generic(ctx, FORMATS[et.ptype], value, et.storage_type)


def round_to(ctx, et: ElemType, value: ir.Value) -> ir.Value:
    """An f32 value rounded to the narrow type and back (the register form of the result)."""
    b = ctx.builder
    if et.ptype == P.BF16:
        bits = b.and_(_bf16_round_bits(ctx, value), _c(I32, 0xFFFF0000))
        return b.bitcast(bits, F32)
    if et.ptype == P.F16 and ctx.native_half:
        bits = nanbits.float_bits(ctx, value)
        nan = b.bitcast(b.or_(b.and_(bits, _c(I32, 0x80000000)), _nan_bits(b, bits)), F32)
        return b.select(is_nan(b, value), nan, b.fpext(b.fptrunc(value, ir.HalfType()), F32))
    return decode(ctx, et, encode(ctx, et, value))


def _nan_bits(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """The f32 exponent and mantissa bits of NaN `bits` as f16 keeps them (the integer
    path's rule): the mantissa's top 10 bits, quiet where those are all zero. The hardware
    conversion would quiet a signalling NaN, and bitcasts of f16 NaNs must round-trip."""
    kept = b.and_(bits, _c(I32, 0x007FE000))
    empty = b.icmp_unsigned("==", kept, _c(I32, 0))
    return b.or_(_c(I32, 0x7F800000), b.select(empty, _c(I32, 0x00400000), kept))


def round_to_bf16_quiet(ctx, value: ir.Value) -> ir.Value:
    """round_to(BF16) of `value` with every NaN the quiet NaN of its sign: XLA CPU's f32 ->
    bf16 conversion in its own nine operations (the rounding add, and for a NaN its sign with
    0x7fc0), the same bits as quieting first and rounding after, which took 17."""
    b = ctx.builder
    bits = nanbits.float_bits(ctx, value)
    rounded = b.and_(_round_half_even_at_16(b, bits), _c(I32, 0xFFFF0000))
    quiet = b.or_(b.and_(bits, _c(I32, 0x80000000)), _c(I32, 0x7FC00000))
    return b.bitcast(b.select(is_nan(b, value), quiet, rounded), F32)


def _bf16_round_bits(ctx, value: ir.Value) -> ir.Value:
    """f32 bits with the top 16 rounded to nearest even.

    NaN keeps its top bits (bitcasts of bf16 NaNs round-trip exactly); one whose payload
    would vanish becomes quiet.
    """
    b = ctx.builder
    bits = nanbits.float_bits(ctx, value)
    rounded = _round_half_even_at_16(b, bits)
    lost = b.icmp_unsigned("==", b.and_(bits, _c(I32, 0x007F0000)), _c(I32, 0))
    nan = b.select(lost, b.or_(bits, _c(I32, 0x00400000)), bits)
    return b.select(_is_nan_bits(b, bits), nan, rounded)


def _round_half_even_at_16(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """f32 bits plus the rounding add that makes the top 16 the nearest-even bf16."""
    lsb = b.and_(b.lshr(bits, _c(I32, 16)), _c(I32, 1))
    return b.add(bits, b.add(lsb, _c(I32, 0x7FFF)))


def _is_nan_bits(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    return b.icmp_unsigned(">", b.and_(bits, _c(I32, 0x7FFFFFFF)), _c(I32, 0x7F800000))


def _encode_generic(ctx, fmt: NarrowFormat, value: ir.Value, storage: ir.IntType) -> ir.Value:
    b = ctx.builder
    m = fmt.man_bits
    # Opaque on CUDA: LLVM would fold the mask into fabs (abs.ftz: canonical NaN payload).
    bits = nanbits.float_bits(ctx, value)
    mag = b.and_(bits, _c(I32, 0x7FFFFFFF))
    negative = b.icmp_unsigned("!=", b.lshr(bits, _c(I32, 31)), _c(I32, 0))
    # Target normal range: round the f32 mantissa to m bits on the bit pattern, then rebias.
    drop = 23 - m
    lsb = b.and_(b.lshr(mag, _c(I32, drop)), _c(I32, 1))
    rounded = b.lshr(b.add(mag, b.add(lsb, _c(I32, (1 << (drop - 1)) - 1))), _c(I32, drop))
    normal = b.sub(rounded, _c(I32, (127 - fmt.bias) << m))
    # Target subnormal range: the code is |x| / smallest-subnormal rounded to an integer
    # (a carry into 2**m correctly yields the smallest normal's code).
    emin = 1 - fmt.bias
    absval = b.bitcast(mag, F32)
    scaled = b.fmul(absval, _c(F32, 2.0 ** (m - emin)))
    sub = b.fptoui(ctx.call("llvm.roundeven.f32", [scaled]), I32)
    is_sub = b.fcmp_ordered("<", absval, _c(F32, 2.0 ** emin))
    code = b.select(is_sub, sub, normal)
    return b.trunc(_finish_code(ctx, fmt, code, mag, negative), storage)


def _finish_code(ctx, fmt: NarrowFormat, code, mag, negative) -> ir.Value:
    """Apply overflow, NaN and sign rules of the format to a magnitude code."""
    b = ctx.builder
    sign_bit = _c(I32, 1 << fmt.sign_shift)
    sign = b.select(negative, sign_bit, _c(I32, 0))
    is_nan = b.icmp_unsigned(">", mag, _c(I32, 0x7F800000))
    over = b.icmp_unsigned(">", code, _c(I32, fmt.max_code))
    if fmt.style == "ieee":
        inf = ((1 << fmt.exp_bits) - 1) << fmt.man_bits
        code = b.select(over, _c(I32, inf), code)
        # NaN keeps the top of its payload (exact round trips); an emptied one becomes quiet.
        payload = b.lshr(b.and_(mag, _c(I32, 0x7FFFFF)), _c(I32, 23 - fmt.man_bits))
        empty = b.icmp_unsigned("==", payload, _c(I32, 0))
        payload = b.select(empty, _c(I32, 1 << (fmt.man_bits - 1)), payload)
        code = b.select(is_nan, b.or_(_c(I32, inf), payload), code)
        return b.or_(code, sign)
    if fmt.style == "fn":
        code = b.select(b.or_(over, is_nan), _c(I32, fmt.max_code + 1), code)
        return b.or_(code, sign)
    if fmt.style == "fnuz":
        nan = b.or_(over, is_nan)
        zero = b.icmp_unsigned("==", code, _c(I32, 0))
        signed = b.select(zero, code, b.or_(code, sign))
        return b.select(nan, sign_bit, signed)
    # "sat" (f4e2m1fn): overflow saturates; NaN becomes a zero of the opposite sign (ml_dtypes).
    code = b.select(over, _c(I32, fmt.max_code), code)
    flipped = b.select(negative, _c(I32, 0), sign_bit)
    return b.select(is_nan, flipped, b.or_(code, sign))


def is_nan(b: ir.IRBuilder, value: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", value, value)

