"""Type changes: convert, bitcast-convert, reduce-precision, stochastic-convert.

convert follows XLA CPU: float → int truncates toward zero, saturates at the integer limits
and maps NaN to 0; int → int wraps; → pred is "!= 0" (NaN is true); complex → real keeps the
real part; float → float rounds to nearest even (f64 → f16/bf16 through f32, as XLA does).
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from ...errors import UnsupportedError
from ...ir import Opcode
from . import numeric as nm
from .registry import impl


def convert_array(x: np.ndarray, dt) -> np.ndarray:
    """Convert an array to element type `dt` with XLA's conversion rules."""
    dt = np.dtype(dt)
    if x.dtype == dt:
        return x.copy()
    src, dst = nm.info(x.dtype), nm.info(dt)
    if dst.kind == "pred":
        if src.is_float or src.is_complex:
            # f32/f64 → pred is an FP compare (denormals read as zero); narrower floats are
            # tested on their bits, so a bf16 denormal is true.
            work = nm.widen(x)
            return nm.as_array((work if work.dtype != x.dtype else nm.flush_denormals(x)) != 0,
                               nm.BOOL)
        return nm.as_array(nm.widen_int(x) != 0, nm.BOOL)
    if src.is_complex:
        if dst.is_complex:
            return x.astype(dt)
        x, src = np.real(x), nm.info(np.real(x).dtype)
    if src.kind == "pred":
        x, src = x.astype(np.uint8), nm.info(np.dtype(np.uint8))
    with np.errstate(all="ignore"):
        if src.is_float:
            return _from_float(nm.widen(x), dt)
        return _from_int(nm.widen_int(x), dt)


def _from_float(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    d = nm.info(dt)
    if d.is_float:
        if nm.F64 in (x.dtype, dt) and x.dtype != dt:
            # f32 <-> f64 is an FP instruction (denormals flushed); f32 -> bf16/f16/f8 is done
            # with integer operations that keep them.
            x = nm.flush_denormals(x)
            if dt != nm.F64 and d.bits >= 16:  # f64 -> f32/bf16/f16 rounds through f32
                x = nm.flush_denormals(x.astype(nm.F32))
        return nm.round_float(x, dt)
    if d.is_complex:
        return x.astype(dt)
    return float_to_int(x, dt)


def _from_int(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    d = nm.info(dt)
    if d.is_integral:
        return nm.wrap_int(x, dt)
    if d.is_complex or d.bits >= 32:
        return x.astype(dt)
    # XLA converts integers to narrow floats through f32 (two roundings for big values).
    return x.astype(nm.F32).astype(dt)


def float_to_int(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Truncate toward zero, saturate at the limits of `dt`, NaN → 0 (x is f32 or f64)."""
    lo, hi = nm.int_limits(dt)
    lo_f, hi_f = x.dtype.type(lo), x.dtype.type(hi)  # hi rounds up to a power of two
    work = np.int64 if lo < 0 else np.uint64
    inside = (x > lo_f) & (x < hi_f)
    exact = np.where(inside, np.trunc(x), 0).astype(work)
    out = np.where(x <= lo_f, work(lo), np.where(x >= hi_f, work(hi), exact))
    return nm.wrap_int(out.astype(work), dt)


@impl(Opcode.CONVERT)
def convert(ctx, instr, ops):
    return convert_array(ops[0], instr.shape.np_dtype)


# ---- bitcast-convert --------------------------------------------------------------------------

def _byte_aligned(dt: np.dtype) -> bool:
    return nm.info(dt).bits == np.dtype(dt).itemsize * 8 or np.dtype(dt) == nm.BOOL


def bitcast_convert_array(x: np.ndarray, dt) -> np.ndarray:
    """Reinterpret bits; a width change adds or removes a minor dimension (little-endian)."""
    dt = np.dtype(dt)
    src_bits, dst_bits = nm.info(x.dtype).bits, nm.info(dt).bits
    x = np.ascontiguousarray(x)
    if _byte_aligned(x.dtype) and _byte_aligned(dt) and sys.byteorder == "little":
        if src_bits == dst_bits:
            return x.view(dt).copy()
        if src_bits > dst_bits:
            wide = x.reshape(x.shape + (1,)).view(dt)
            return wide.reshape(x.shape + (src_bits // dst_bits,)).copy()
        return x.view(dt).reshape(x.shape[:-1]).copy()
    return _bitcast_by_bits(x, dt, src_bits, dst_bits)


def _bitcast_by_bits(x: np.ndarray, dt: np.dtype, src_bits: int, dst_bits: int) -> np.ndarray:
    """Sub-byte types: split/join bit patterns with shifts (element 0 = least significant)."""
    bits = nm.to_bits(x)
    if src_bits == dst_bits:
        return nm.from_bits(bits, dt)
    if src_bits > dst_bits:
        ratio = src_bits // dst_bits
        shifts = (np.arange(ratio, dtype=np.uint64) * np.uint64(dst_bits))
        return nm.from_bits(bits[..., None] >> shifts, dt)
    ratio = dst_bits // src_bits
    shifts = (np.arange(ratio, dtype=np.uint64) * np.uint64(src_bits))
    joined = np.bitwise_or.reduce(bits << shifts, axis=-1) if ratio else bits
    return nm.from_bits(np.asarray(joined, np.uint64), dt)


@impl(Opcode.BITCAST_CONVERT)
def bitcast_convert(ctx, instr, ops):
    return bitcast_convert_array(ops[0], instr.shape.np_dtype)


# ---- reduce-precision -------------------------------------------------------------------------

# Explicit mantissa widths of the types whose bits the algorithm works on directly.
_MANTISSA_BITS = {np.dtype(np.float16): 10, np.dtype(ml_dtypes.bfloat16): 7,
                  np.dtype(np.float32): 23, np.dtype(np.float64): 52}


def reduce_precision_array(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round to a float format with the given exponent/mantissa widths, in x's own type.

    Round-to-nearest-even on the mantissa, overflow to ±inf, values at or below the reduced
    format's smallest normal exponent flushed to ±0, NaN returned unchanged.
    """
    if not nm.info(x.dtype).is_float:
        raise UnsupportedError(f"reduce-precision needs a float operand, got {x.dtype}")
    if x.dtype not in _MANTISSA_BITS:  # f8/f4: XLA CPU computes these in f32
        return nm.round_float(reduce_precision_array(x.astype(nm.F32), exponent_bits,
                                                     mantissa_bits), x.dtype)
    nbits = x.dtype.itemsize * 8
    src_m = _MANTISSA_BITS[x.dtype]
    src_e = nbits - 1 - src_m
    full = (1 << nbits) - 1
    u = nm.to_bits(x)
    sign_mask = 1 << (nbits - 1)
    exp_mask = ((1 << src_e) - 1) << src_m
    is_nan = (u & np.uint64(full ^ sign_mask)) > np.uint64(exp_mask)
    if mantissa_bits < src_m:
        u = _round_mantissa(u, src_m - mantissa_bits, full)
    if exponent_bits < src_e:
        u = _clamp_exponent(u, src_e, src_m, exponent_bits, sign_mask, exp_mask)
    # NaNs come back unchanged (rounding could carry their mantissa into the exponent).
    return np.where(is_nan, x, nm.from_bits(u, x.dtype))


def _round_mantissa(u, dropped: int, full: int):
    last = 1 << dropped
    last_bit = (u & np.uint64(last)) >> np.uint64(dropped)
    bias = last_bit + np.uint64((last >> 1) - 1)
    # A carry out of the mantissa correctly bumps the exponent.
    return (u + bias) & np.uint64(full & ~(last - 1))


def _clamp_exponent(u, src_e, src_m, exponent_bits, sign_mask, exp_mask):
    bias = (1 << (src_e - 1)) - 1
    reduced_bias = (1 << (exponent_bits - 1)) - 1
    max_exp = (bias + reduced_bias) << src_m
    min_exp = (bias - reduced_bias) << src_m
    exponent = u & np.uint64(exp_mask)
    signed_zero = u & np.uint64(sign_mask)
    signed_inf = signed_zero | np.uint64(exp_mask)
    u = np.where(exponent > np.uint64(max_exp), signed_inf, u)
    return np.where(exponent <= np.uint64(min_exp), signed_zero, u)


@impl(Opcode.REDUCE_PRECISION)
def reduce_precision(ctx, instr, ops):
    return reduce_precision_array(ops[0], instr.attrs.exponent_bits, instr.attrs.mantissa_bits)


# ---- stochastic-convert -----------------------------------------------------------------------

@impl(Opcode.STOCHASTIC_CONVERT)
def stochastic_convert(ctx, instr, ops):
    """Float → signed int, rounding up when random < fraction * 2**bits(random)."""
    x, random = np.broadcast_arrays(*ops)
    dt = instr.shape.np_dtype
    if not nm.info(dt).is_signed_int:
        raise UnsupportedError(f"stochastic-convert %{instr.name}: only float → signed int is "
                               f"supported (XLA decomposes nothing else)")
    with np.errstate(all="ignore"):
        w = nm.widen(x)
        mag = np.abs(w)
        whole = np.floor(mag)
        frac = (mag - whole).astype(nm.F32 if w.dtype != nm.F64 else nm.F64)
        scaled = float_to_int(frac * frac.dtype.type(2.0 ** nm.bits_of(random.dtype)),
                              random.dtype)
        up = nm.unsigned_view(random) < nm.unsigned_view(scaled)
        base = float_to_int(whole, dt).astype(np.int64)
        value = np.where(up, base + 1, base)
        value = np.where(w < 0, -value, value)
        lo, hi = nm.int_limits(dt)
        value = np.where(w <= lo, lo, np.where(w >= hi, hi, value))
    return nm.wrap_int(value.astype(np.int64), dt)
