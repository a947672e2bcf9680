"""How HLO element types live in LLVM: register (value) types, memory (storage) types.

Registers: pred is i1; sN/uN are iN (two's complement, wrap-around for free; signedness is
in the operations); f32/f64 are float/double; every narrower float (bf16, f16, f8*, f4*) is
held as an f32 whose value is exactly representable in the narrow type, so each op computes
in f32 and rounds once, as XLA CPU does.

Memory: pred and sub-byte integers take one byte each (numpy/ml_dtypes layout: an s4 is its
low nibble), narrow floats are stored as their bit patterns (i8/i16).

Complex numbers (c64/c128) are an LLVM struct {re, im} of f32/f64 in registers and in
memory: numpy's interleaved layout. Their lowerings live in complex_*.py (see registry.py).
Only code that handles them asks for them (`elem_type(t, complex_ok=True)`); everywhere else
a complex type is still an UnsupportedError, so real-only kernels reject it cleanly.
"""

from __future__ import annotations

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import PrimitiveType, dtypes
from ...util.record import dataclass

P = PrimitiveType
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()


@dataclass(frozen=True)
class ElemType:
    """An element type's LLVM facts."""

    ptype: PrimitiveType
    kind: str  # "pred" | "int" | "uint" | "float" | "complex"
    bits: int  # logical width
    value_type: ir.Type
    storage_type: ir.Type

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_narrow_float(self) -> bool:
        """Floats held in f32 registers and rounded after every operation."""
        return self.kind == "float" and self.bits < 32

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def part(self) -> ElemType:
        """The type of a complex number's real and imaginary parts (f32 or f64)."""
        if not self.is_complex:
            raise TypeError(f"{self.ptype.name.lower()} is not a complex type")
        return elem_type(P.F64 if self.bits == 128 else P.F32)

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def byte_size(self) -> int:
        return dtypes.info(self.ptype).byte_size


def type_bytes(t: ir.Type) -> int:
    """Bytes of one value of LLVM type `t` in memory (an i1 takes a byte; a complex
    {re, im} struct both parts)."""
    if isinstance(t, ir.LiteralStructType):
        return sum(type_bytes(e) for e in t.elements)
    if isinstance(t, ir.IntType):
        return max(1, -(-t.width // 8))
    if isinstance(t, ir.HalfType):
        return 2
    return 8 if isinstance(t, ir.DoubleType) else 4


def _storage_int(bits: int) -> ir.IntType:
    return ir.IntType(max(8, bits))


COMPLEX64 = ir.LiteralStructType([F32, F32])
COMPLEX128 = ir.LiteralStructType([F64, F64])


def elem_type(ptype: PrimitiveType, *, complex_ok: bool = False) -> ElemType:
    """The ElemType of an array element type; UnsupportedError for tuple/token/etc. and, unless
    `complex_ok`, for complex types."""
    d = dtypes.info(ptype)
    if d.kind == "pred":
        return ElemType(d.ptype, "pred", 1, I1, I8)
    if d.kind in ("int", "uint"):
        if d.bits == 1:
            raise UnsupportedError(f"element type {d.name} is not supported by the code generator")
        return ElemType(d.ptype, d.kind, d.bits, ir.IntType(d.bits), _storage_int(d.bits))
    if d.kind == "float":
        if d.ptype == P.F8E8M0FNU:
            raise UnsupportedError("element type f8e8m0fnu is not supported by the code generator")
        if d.bits == 64:
            return ElemType(d.ptype, "float", 64, F64, F64)
        if d.bits == 32:
            return ElemType(d.ptype, "float", 32, F32, F32)
        return ElemType(d.ptype, "float", d.bits, F32, _storage_int(d.bits))
    if d.kind == "complex" and complex_ok:
        pair = COMPLEX128 if d.bits == 128 else COMPLEX64
        return ElemType(d.ptype, "complex", d.bits, pair, pair)
    raise UnsupportedError(f"element type {d.name} is not supported by the code generator")


def int_type(bits: int) -> ir.IntType:
    return ir.IntType(bits)
