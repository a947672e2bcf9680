"""Numeric helpers shared by the elementwise interpreter ops (no opcode registrations here).

Three XLA CPU facts live here so each opcode stays short:
- Float types narrower than f32 (bf16, f16, the f8/f4 family) are computed by widening to
  f32, doing the f32 operation and rounding the result back once.
- f32/f64 arithmetic runs with denormals flushed to zero: denormal operands read as ±0
  (DAZ) and denormal results become ±0 (FTZ). Pure bit operations (negate, abs, select,
  bitcast, f32 → bf16 rounding) keep denormals. f16 values are normal in f32, so f16
  denormals survive; bf16 denormals are f32 denormals and do not.
- Integer arithmetic wraps modulo 2**bits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir import dtypes
from ...ir.dtypes import DTypeInfo

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
C64 = np.dtype(np.complex64)
C128 = np.dtype(np.complex128)
BOOL = np.dtype(np.bool_)

# Storage dtypes numpy does arithmetic on natively (everything else is widened first).
_NATIVE_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                                np.uint8, np.uint16, np.uint32, np.uint64))
_UINT_OF_BITS = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: np.dtype(np.uint32),
                 64: np.dtype(np.uint64)}
_SINT_OF_BITS = {8: np.dtype(np.int8), 16: np.dtype(np.int16), 32: np.dtype(np.int32),
                 64: np.dtype(np.int64)}


def info(dt: np.dtype) -> DTypeInfo:
    """The XLA type facts of a numpy / ml_dtypes dtype."""
    return dtypes.info(dtypes.from_numpy(np.dtype(dt)))


def is_low_float(dt: np.dtype) -> bool:
    """Float types XLA CPU computes in f32 (bf16, f16, f8*, f4*)."""
    d = info(dt)
    return d.is_float and d.bits < 32


def is_float(dt: np.dtype) -> bool:
    return info(dt).is_float


def is_complex(dt: np.dtype) -> bool:
    return np.dtype(dt).kind == "c"


def as_array(value, dt: np.dtype) -> np.ndarray:
    """Coerce a numpy result (possibly a 0-d scalar) to an ndarray of `dt`."""
    return np.asarray(value).astype(dt, copy=False)


# ---- floats -------------------------------------------------------------------------------

_FLUSHABLE = frozenset((F32, F64, C64, C128))


def flush_denormals(x: np.ndarray) -> np.ndarray:
    """Denormal f32/f64 (or complex parts) replaced by zero of the same sign; others unchanged."""
    if x.dtype not in _FLUSHABLE:
        return x
    if x.dtype.kind == "c":
        return make_complex(flush_denormals(x.real), flush_denormals(x.imag), x.dtype)
    tiny = np.finfo(x.dtype).tiny
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x) < tiny, np.copysign(np.zeros_like(x), x), x)


def make_complex(re: np.ndarray, im: np.ndarray, dt: np.dtype) -> np.ndarray:
    """A complex array from its parts (re + 1j*im would turn (x, inf) into (nan, inf))."""
    out = np.empty(np.shape(re), dt)
    out.real = re
    out.imag = im
    return out


def widen(x: np.ndarray) -> np.ndarray:
    """Low-precision floats widened (exactly) to f32; other arrays unchanged."""
    return x.astype(F32) if is_low_float(x.dtype) else x


def round_float(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Round a float array to float type `dt` the way XLA CPU converts.

    f64 → f16/bf16 goes through f32 (XLA rounds twice there); f64 → f8/f4 rounds once, which
    we get exactly by rounding to f32 with round-to-odd first (odd intermediates with two or
    more extra bits make the second rounding correct).
    """
    dt = np.dtype(dt)
    if x.dtype == dt:
        return x
    with np.errstate(all="ignore"):
        if x.dtype == F64 and is_low_float(dt):
            x = x.astype(F32) if info(dt).bits == 16 else _f64_to_f32_round_to_odd(x)
        return x.astype(dt)


def _f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    near = x.astype(F32)
    inexact = (near.astype(F64) != x) & np.isfinite(x)
    # Truncate toward zero, then force the last mantissa bit on for inexact values.
    overshoot = inexact & (np.abs(near.astype(F64)) > np.abs(x))
    trunc = np.where(overshoot, np.nextafter(near, np.float32(0)), near)
    bits = trunc.view(np.uint32) | np.where(inexact, np.uint32(1), np.uint32(0))
    return bits.view(F32)


def float_op(fn: Callable, args: list[np.ndarray], out_dt: np.dtype, *,
             precise: bool = False, daz: bool = True, ftz: bool = True) -> np.ndarray:
    """Apply `fn` elementwise on floats with XLA CPU's precision and denormal rules.

    Low-precision floats are computed in f32 and rounded back once. With `precise`, f32 and
    c64 are computed in f64/c128 and rounded (transcendental functions: the reference should
    be the correctly rounded value, XLA's own approximations are within the tolerances).
    `daz` reads denormal operands as ±0, `ftz` flushes denormal results (both are on for
    arithmetic, off for bit operations and for libm calls that test bits themselves).
    """
    out_dt = np.dtype(out_dt)
    work = [widen(a) for a in args]
    if daz:
        work = [flush_denormals(a) for a in work]
    if precise:
        work = [_precise(a) for a in work]
    with np.errstate(all="ignore"):
        result = np.asarray(fn(*work))
        if out_dt == BOOL:
            return as_array(result, BOOL)
        if is_complex(out_dt) or is_complex(result.dtype):
            result = as_array(result, out_dt)
            return flush_denormals(result) if ftz else result
        if result.dtype == F64 and out_dt != F64:
            result = result.astype(F32)  # XLA computed in f32
    return round_float(flush_denormals(result) if ftz else result, out_dt)


def _precise(a: np.ndarray) -> np.ndarray:
    if a.dtype == F32:
        return a.astype(F64)
    if a.dtype == C64:
        return a.astype(C128)
    return a


# ---- integers -----------------------------------------------------------------------------

def uint_of(dt: np.dtype) -> np.dtype:
    """The unsigned storage type of the same width (sub-byte types: a byte)."""
    return _UINT_OF_BITS[max(8, np.dtype(dt).itemsize * 8)]


def bits_of(dt: np.dtype) -> int:
    return info(dt).bits


def to_bits(x: np.ndarray) -> np.ndarray:
    """Element bit patterns as uint64, masked to the element width."""
    d = info(x.dtype)
    raw = x.view(uint_of(x.dtype)).astype(np.uint64)
    if d.bits < 8 or x.dtype == BOOL:
        raw &= np.uint64((1 << d.bits) - 1) if x.dtype != BOOL else np.uint64(1)
    return raw


def from_bits(bits: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Inverse of to_bits: uint64 bit patterns (low bits used) to elements of `dt`."""
    dt = np.dtype(dt)
    d = info(dt)
    if dt == BOOL:
        return (bits & np.uint64(1)).astype(BOOL)
    mask = np.uint64((1 << d.bits) - 1) if d.bits < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
    storage = uint_of(dt)
    return (bits & mask).astype(storage).view(dt)


def wrap_int(values: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Integers (any numpy int type) wrapped modulo 2**bits into integer type `dt`."""
    dt = np.dtype(dt)
    if values.dtype == dt:
        return values
    with np.errstate(all="ignore"):
        if dt in _NATIVE_INTS:
            return values.astype(dt)
        return from_bits(values.astype(np.int64).view(np.uint64), dt)


def widen_int(x: np.ndarray) -> np.ndarray:
    """Sub-byte ints widened to int8/uint8 so numpy can compute on them."""
    if x.dtype in _NATIVE_INTS or x.dtype == BOOL:
        return x
    return x.astype(np.int8 if info(x.dtype).is_signed_int else np.uint8)


def int_op(fn: Callable, args: list[np.ndarray], out_dt: np.dtype) -> np.ndarray:
    """Apply `fn` on integer arrays with two's-complement wrap-around into `out_dt`."""
    out_dt = np.dtype(out_dt)
    native = out_dt in _NATIVE_INTS
    work = [a if native else widen_int(a).astype(np.int64) for a in args]
    with np.errstate(all="ignore"):
        result = np.asarray(fn(*work))
    if out_dt == BOOL:
        return as_array(result, BOOL)
    return wrap_int(result, out_dt)


def signed_view(x: np.ndarray) -> np.ndarray:
    """The two's-complement signed reading of an integer array's bits (same width)."""
    if x.dtype in _SINT_OF_BITS.values():
        return x
    if x.dtype in _NATIVE_INTS:
        return x.view(_SINT_OF_BITS[x.dtype.itemsize * 8])
    bits = info(x.dtype).bits
    v = to_bits(x).astype(np.int64)
    return np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)


def unsigned_view(x: np.ndarray) -> np.ndarray:
    """The unsigned reading of an integer array's bits (same width; sub-byte: uint64)."""
    if x.dtype in _UINT_OF_BITS.values():
        return x
    if x.dtype in _NATIVE_INTS:
        return x.view(_UINT_OF_BITS[x.dtype.itemsize * 8])
    return to_bits(x)


def int_limits(dt: np.dtype) -> tuple[int, int]:
    d = info(dt)
    if d.is_signed_int:
        return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1
    return 0, (1 << d.bits) - 1

