"""compare: directions EQ NE LT LE GT GE under comparison types FLOAT, TOTALORDER, SIGNED, UNSIGNED.

FLOAT is IEEE (NaN is unordered: only NE is true; f32/f64 denormals read as zero, as on
XLA CPU). TOTALORDER orders floats by their bits, -NaN < -inf < ... < -0 < +0 < ... < inf
< NaN (f8/f4 after widening to f32, like XLA CPU). The default type comes from the element
type: FLOAT for floats and complex, SIGNED for signed integers, UNSIGNED for the rest.
"""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...ir import Opcode
from . import numeric as nm
from .registry import impl

DIRECTIONS = {
    "EQ": np.equal, "NE": np.not_equal, "LT": np.less,
    "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
}


def default_comparison_type(dt: np.dtype) -> str:
    """XLA's default comparison type of an element type."""
    d = nm.info(dt)
    if d.is_float or d.is_complex:
        return "FLOAT"
    return "SIGNED" if d.is_signed_int else "UNSIGNED"


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers that order floats totally (sign-magnitude bits → two's complement)."""
    if nm.info(x.dtype).bits <= 8:
        # XLA CPU widens f8/f4 to f32 before comparing; that maps the fnuz types' single NaN
        # (the "-0" pattern) to -NaN, the smallest value, instead of just below +0.
        x = x.astype(nm.F32)
    width = x.dtype.itemsize * 8
    signed = x.view(np.dtype(f"int{width}"))
    # Negative floats: flip every non-sign bit so larger magnitudes come out smaller.
    flip = np.array((1 << (width - 1)) - 1).astype(signed.dtype)
    return np.where(signed < 0, signed ^ flip, signed)


def _keys(a: np.ndarray, b: np.ndarray, ctype: str) -> tuple[np.ndarray, np.ndarray]:
    if ctype == "TOTALORDER" and nm.is_float(a.dtype):
        return total_order_key(a), total_order_key(b)
    if ctype == "FLOAT":
        # An FP compare instruction: denormal operands read as zero on XLA CPU.
        return nm.flush_denormals(nm.widen(a)), nm.flush_denormals(nm.widen(b))
    if a.dtype == nm.BOOL:
        return a.astype(np.uint8), b.astype(np.uint8)
    if ctype == "SIGNED":
        return nm.signed_view(a), nm.signed_view(b)
    if ctype == "UNSIGNED":
        return nm.unsigned_view(a), nm.unsigned_view(b)
    return nm.widen_int(a), nm.widen_int(b)


@impl(Opcode.COMPARE)
def compare(ctx, instr, ops):
    a, b = np.broadcast_arrays(*ops)
    direction = instr.attrs.comparison_direction or ""
    if direction not in DIRECTIONS:
        raise UnsupportedError(f"compare %{instr.name}: unknown direction '{direction}'")
    ctype = instr.attrs.comparison_type or default_comparison_type(a.dtype)
    if nm.is_complex(a.dtype) and direction not in ("EQ", "NE"):
        raise UnsupportedError(f"compare %{instr.name}: complex numbers support only EQ and NE")
    ka, kb = _keys(a, b, ctype)
    with np.errstate(all="ignore"):
        return nm.as_array(DIRECTIONS[direction](ka, kb), nm.BOOL)
