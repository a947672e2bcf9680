"""XLA primitive types: enum values, HLO text names, widths and numpy dtypes.

NumPy (and ml_dtypes) are imported at the first use of a numpy dtype, not with this module:
a compile whose constants are all scalars never needs them (ir/literal.py), and importing
NumPy is a quarter of such a compile's time as a command of its own.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from ..util.record import dataclass

if TYPE_CHECKING:
    import numpy as np


class PrimitiveType(enum.IntEnum):
    """XLA's PrimitiveType enum; values are the wire values in xla_data.proto."""

    INVALID = 0
    PRED = 1
    S8 = 2
    S16 = 3
    S32 = 4
    S64 = 5
    U8 = 6
    U16 = 7
    U32 = 8
    U64 = 9
    F16 = 10
    F32 = 11
    F64 = 12
    TUPLE = 13
    OPAQUE_TYPE = 14
    C64 = 15
    BF16 = 16
    TOKEN = 17
    C128 = 18
    F8E5M2 = 19
    F8E4M3FN = 20
    S4 = 21
    U4 = 22
    F8E4M3B11FNUZ = 23
    F8E5M2FNUZ = 24
    F8E4M3FNUZ = 25
    S2 = 26
    U2 = 27
    F8E4M3 = 28
    F8E3M4 = 29
    S1 = 30
    U1 = 31
    F4E2M1FN = 32
    F8E8M0FNU = 33
    BUFFER = 34


@dataclass(frozen=True)
class DTypeInfo:
    """Facts about one primitive type."""

    ptype: PrimitiveType
    name: str  # HLO text spelling, e.g. "f32", "pred", "bf16"
    bits: int  # storage width of one element in bits (0 for tuple/token/opaque)
    kind: str  # "pred" | "int" | "uint" | "float" | "complex" | "other"
    np_name: str | None  # numpy's (or "ml_dtypes.NAME") element type used for literals

    @property
    def np_dtype(self) -> np.dtype | None:
        """The numpy (or ml_dtypes) element type of literals (imports NumPy on first use)."""
        if self.np_name is None:
            return None
        found = _NP_DTYPES.get(self.ptype)
        if found is None:
            found = _NP_DTYPES[self.ptype] = _numpy_dtype(self.np_name)
        return found

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_unsigned_int(self) -> bool:
        return self.kind == "uint"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_array_type(self) -> bool:
        return self.np_name is not None

    @property
    def byte_size(self) -> int:
        """Bytes one element occupies in a dense buffer (sub-byte types take a whole byte)."""
        return max(1, (self.bits + 7) // 8) if self.bits else 0

    @property
    def int_range(self) -> tuple[int, int]:
        """(lowest, highest) value of an integer type (two's complement when signed)."""
        if self.kind == "int":
            return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        return 0, (1 << self.bits) - 1

    def wrap(self, value: int) -> int:
        """`value` wrapped to an integer type's width, as its integer arithmetic (and NumPy's
        astype) wraps: two's complement when signed."""
        low = self.int_range[0]
        return (value - low) % (1 << self.bits) + low


_NP_DTYPES: dict[PrimitiveType, np.dtype] = {}


def _numpy_dtype(name: str) -> np.dtype:
    import numpy as np

    if name.startswith("ml_dtypes."):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name.split(".", 1)[1]))
    return np.dtype(name)


def _dt(name: str) -> str:
    return f"ml_dtypes.{name}"


P = PrimitiveType
_TABLE = [
    DTypeInfo(P.PRED, "pred", 8, "pred", "bool"),
    DTypeInfo(P.S1, "s1", 1, "int", None),
    DTypeInfo(P.S2, "s2", 2, "int", _dt("int2")),
    DTypeInfo(P.S4, "s4", 4, "int", _dt("int4")),
    DTypeInfo(P.S8, "s8", 8, "int", "int8"),
    DTypeInfo(P.S16, "s16", 16, "int", "int16"),
    DTypeInfo(P.S32, "s32", 32, "int", "int32"),
    DTypeInfo(P.S64, "s64", 64, "int", "int64"),
    DTypeInfo(P.U1, "u1", 1, "uint", None),
    DTypeInfo(P.U2, "u2", 2, "uint", _dt("uint2")),
    DTypeInfo(P.U4, "u4", 4, "uint", _dt("uint4")),
    DTypeInfo(P.U8, "u8", 8, "uint", "uint8"),
    DTypeInfo(P.U16, "u16", 16, "uint", "uint16"),
    DTypeInfo(P.U32, "u32", 32, "uint", "uint32"),
    DTypeInfo(P.U64, "u64", 64, "uint", "uint64"),
    DTypeInfo(P.F16, "f16", 16, "float", "float16"),
    DTypeInfo(P.BF16, "bf16", 16, "float", _dt("bfloat16")),
    DTypeInfo(P.F32, "f32", 32, "float", "float32"),
    DTypeInfo(P.F64, "f64", 64, "float", "float64"),
    DTypeInfo(P.F8E5M2, "f8e5m2", 8, "float", _dt("float8_e5m2")),
    DTypeInfo(P.F8E4M3FN, "f8e4m3fn", 8, "float", _dt("float8_e4m3fn")),
    DTypeInfo(P.F8E4M3B11FNUZ, "f8e4m3b11fnuz", 8, "float", _dt("float8_e4m3b11fnuz")),
    DTypeInfo(P.F8E5M2FNUZ, "f8e5m2fnuz", 8, "float", _dt("float8_e5m2fnuz")),
    DTypeInfo(P.F8E4M3FNUZ, "f8e4m3fnuz", 8, "float", _dt("float8_e4m3fnuz")),
    DTypeInfo(P.F8E4M3, "f8e4m3", 8, "float", _dt("float8_e4m3")),
    DTypeInfo(P.F8E3M4, "f8e3m4", 8, "float", _dt("float8_e3m4")),
    DTypeInfo(P.F4E2M1FN, "f4e2m1fn", 4, "float", _dt("float4_e2m1fn")),
    DTypeInfo(P.F8E8M0FNU, "f8e8m0fnu", 8, "float", _dt("float8_e8m0fnu")),
    DTypeInfo(P.C64, "c64", 64, "complex", "complex64"),
    DTypeInfo(P.C128, "c128", 128, "complex", "complex128"),
    DTypeInfo(P.TUPLE, "tuple", 0, "other", None),
    DTypeInfo(P.TOKEN, "token", 0, "other", None),
    DTypeInfo(P.OPAQUE_TYPE, "opaque", 0, "other", None),
    DTypeInfo(P.BUFFER, "buffer", 0, "other", None),
    DTypeInfo(P.INVALID, "invalid", 0, "other", None),
]

_BY_TYPE: dict[PrimitiveType, DTypeInfo] = {d.ptype: d for d in _TABLE}
_BY_NAME: dict[str, DTypeInfo] = {d.name: d for d in _TABLE}
_BY_NP: dict[np.dtype, DTypeInfo] = {}  # made at the first from_numpy


def _by_numpy() -> dict[np.dtype, DTypeInfo]:
    global _BY_NP
    if not _BY_NP:
        table: dict[np.dtype, DTypeInfo] = {}
        for d in _TABLE:
            if d.np_dtype is not None and d.np_dtype not in table:
                table[d.np_dtype] = d
        _BY_NP = table
    return _BY_NP


def info(ptype: PrimitiveType) -> DTypeInfo:
    """The DTypeInfo of a primitive type."""
    return _BY_TYPE[PrimitiveType(ptype)]


def from_name(name: str) -> PrimitiveType:
    """Parse an HLO text type name ("f32", "pred", ...); KeyError if unknown."""
    return _BY_NAME[name].ptype


def is_type_name(name: str) -> bool:
    return name in _BY_NAME


def to_numpy(ptype: PrimitiveType) -> np.dtype:
    """The numpy dtype holding elements of ptype; ValueError if it has none."""
    d = info(ptype)
    if d.np_dtype is None:
        raise ValueError(f"type {d.name} has no array representation")
    return d.np_dtype


def from_numpy(dtype: np.dtype) -> PrimitiveType:
    """The primitive type of a numpy (or ml_dtypes) dtype; ValueError if unsupported."""
    import numpy as np

    d = _by_numpy().get(np.dtype(dtype))
    if d is None:
        raise ValueError(f"numpy dtype {np.dtype(dtype)} has no XLA primitive type")
    return d.ptype


def name(ptype: PrimitiveType) -> str:
    return info(ptype).name
