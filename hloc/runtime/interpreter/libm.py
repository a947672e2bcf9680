"""How XLA CPU's libm calls (atan2f/atan2, powf/pow) behave with denormals flushed.

XLA CPU calls the host libm for atan2 and power and runs with denormals-are-zero. The libm
special cases test bit patterns (a denormal is not zero there) while the arithmetic in between
reads denormals as zero. These functions reproduce the observable results; each takes f32
or f64 arrays (bf16/f16/f8 already widened to f32) and returns f64 values to be rounded.
"""

from __future__ import annotations

import numpy as np

from . import numeric as nm


def _finite_nonzero(x: np.ndarray) -> np.ndarray:
    # numpy itself keeps denormals, so x != 0 is the bit-level "not ±0" test.
    return np.isfinite(x) & (x != 0)


def atan2(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """atan2 as XLA CPU computes it (IEEE atan2 wherever no denormal is involved)."""
    yd, xd = y.astype(nm.F64), x.astype(nm.F64)
    ieee = np.arctan2(yd, xd)
    if y.dtype == nm.F64:
        return _atan2_f64(y, x, ieee)
    # atan2f: zeros, infinities, NaN and x == 1 are decided on bits; otherwise the result is
    # atan(|y/x|) moved into y's and x's quadrant, with y/x an f32 division on flushed operands.
    regular = _finite_nonzero(y) & _finite_nonzero(x) & (x != 1)
    q = nm.flush_denormals(nm.flush_denormals(y) / nm.flush_denormals(x))
    a = np.arctan(np.abs(q.astype(nm.F64)))
    right = np.where(np.signbit(y), -a, a)
    left = np.where(np.signbit(y), a - np.pi, np.pi - a)
    quadrant = np.where(np.signbit(x), left, right)
    # atan2f never flushes its result (x == 1 returns atan(y) = y for a denormal y).
    return np.where(regular, quadrant, ieee)


def _atan2_f64(y, x, ieee):
    # libm's atan2 (measured): a zero or denormal x gives ±pi/2 for any nonzero y; a
    # denormal y gives ±0 against a positive finite x and -pi (whatever y's sign) against a
    # negative one. Everything else is IEEE.
    x_zero = nm.flush_denormals(x) == 0
    y_denormal = (y != 0) & (nm.flush_denormals(y) == 0)
    vertical = x_zero & (y != 0) & ~np.isnan(y)
    finite_x = np.isfinite(x) & ~x_zero
    tiny_y = np.where(np.signbit(x), -np.pi, np.copysign(0.0, y))
    result = np.where(y_denormal & finite_x, tiny_y, ieee)
    return np.where(vertical, np.copysign(np.pi / 2, y), result)


def power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """pow as XLA CPU computes it: a denormal base acts as ±2**-150 (f32) or ±2**-1075 (f64).

    powf/pow normalize a denormal base by scaling it, which reads as zero under
    denormals-are-zero and leaves exactly that power of two; exponents are not flushed.
    """
    xd, yd = x.astype(nm.F64), y.astype(nm.F64)
    result = np.power(xd, yd)
    denormal = _finite_nonzero(x) & (nm.flush_denormals(x) == 0)
    if not denormal.any():
        return result
    exponent = -150.0 if x.dtype != nm.F64 else -1075.0
    magnitude = np.exp2(exponent * yd)
    integral = np.isfinite(yd) & (np.floor(yd) == yd)
    odd = integral & (np.fmod(np.abs(yd), 2.0) == 1.0)
    signed = np.where(odd, -magnitude, magnitude)
    # A negative base needs an integral exponent (infinities count as even).
    negative_base = np.where(integral, signed, np.where(np.isinf(yd), magnitude, np.nan))
    scaled = np.where(np.signbit(x), negative_base, magnitude)
    # pow(x, ±0) is 1 and NaN exponents propagate before any of this.
    scaled = np.where(yd == 0, 1.0, np.where(np.isnan(yd), yd, scaled))
    return np.where(denormal, scaled, result)
