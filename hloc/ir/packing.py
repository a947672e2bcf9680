"""Element bytes of small literals without NumPy: Python values <-> little-endian row-major
bytes, exactly as `numpy.array(values, dtype).tobytes()` and `numpy.frombuffer(...).tolist()`
give them, for the element types whose conversion the `struct` module performs the same way.

A compile whose constants are all small (scalars, a few elements: most modules) then needs no
NumPy at all (ir/literal.py keeps such a literal as bytes and makes its array on first use).
Where `struct` and NumPy could disagree, `pack` answers None and the caller takes NumPy's path:
a NaN with a payload (the default quiet NaN, either sign, converts alike every way: `nan`
constants are those), a value out of the type's range (NumPy overflows to inf or refuses
it, `struct` raises), an integer beyond 2**53 for a float type (NumPy rounds once, through
double twice), a non-integer for an integer type (NumPy truncates), a value of a type other
than bool, int and float, and every element type outside FORMATS (bf16, f8, complex, ...).
"""

from __future__ import annotations

import math
import struct
import sys

from .dtypes import PrimitiveType as P

# struct codes, little-endian, of the element types packed here (NumPy's itemsize each).
FORMATS: dict[P, str] = {
    P.PRED: "?", P.S8: "b", P.S16: "h", P.S32: "i", P.S64: "q",
    P.U8: "B", P.U16: "H", P.U32: "I", P.U64: "Q",
    P.F16: "e", P.F32: "f", P.F64: "d",
}
_FLOATS = frozenset({P.F16, P.F32, P.F64})
_EXACT_INT = 2 ** 53
LITTLE = sys.byteorder == "little"  # NumPy's native bytes are the literal's bytes only here


def pack(values, ptype: P) -> bytes | None:
    """The bytes NumPy would store for `values` (a sequence of Python bools, ints and floats)
    as elements of `ptype`, or None where only NumPy can say (see the module doc)."""
    code = FORMATS.get(ptype)
    if code is None or not LITTLE:
        return None
    for v in values:
        kind = type(v)
        if kind is float:
            if (math.isnan(v) and not _default_nan(v)) or (ptype not in _FLOATS and ptype != P.PRED):
                return None
        elif kind is int:
            if ptype in _FLOATS and abs(v) > _EXACT_INT:
                return None
        elif kind is not bool:
            return None
    try:
        return struct.pack(f"<{len(values)}{code}", *values)
    except (struct.error, OverflowError):
        return None


_DEFAULT_NAN = 0x7FF8000000000000  # a double's quiet NaN with no payload (sign bit aside)


def _default_nan(v: float) -> bool:
    """Whether NaN `v` is the default quiet NaN of either sign: narrowed, it becomes the
    narrow type's default quiet NaN of the same sign, in struct and NumPy alike."""
    return struct.unpack("<Q", struct.pack("<d", v))[0] & ~(1 << 63) == _DEFAULT_NAN


def unpack(data: bytes, ptype: P) -> tuple | None:
    """The elements of `data` as Python values (bool, int or float: what NumPy's `tolist`
    gives), or None for an element type not packed here and for f16 NaNs (`struct` drops
    their payload)."""
    code = FORMATS.get(ptype)
    if code is None or not LITTLE:
        return None
    count = len(data) // struct.calcsize(code)
    if ptype == P.F16 and any(h & 0x7C00 == 0x7C00 and h & 0x3FF
                              for h in struct.unpack(f"<{count}H", data)):
        return None
    return struct.unpack(f"<{count}{code}", data)
