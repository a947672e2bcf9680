"""Array elements in memory: layout-aware offsets, loads and stores in storage form.

A complex element is loaded and stored part by part (two float accesses at stride 2), which
LLVM's vectorizer handles as an interleaved group; struct loads would hide that from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from ...ir import Shape
from . import lowfloat
from .complex import ir as complex_ir
from .types import I32, ElemType, elem_type

if TYPE_CHECKING:
    import numpy as np


def major_to_minor(shape: Shape) -> list[int]:
    """Logical dimensions from the slowest-varying to the contiguous one."""
    return shape.major_to_minor()


def strides(shape: Shape) -> list[int]:
    """Element stride of each logical dimension under the shape's layout."""
    out = [0] * shape.rank
    step = 1
    for d in reversed(major_to_minor(shape)):
        out[d] = step
        step *= shape.dims[d]
    return out


def linear_offset(ctx, shape: Shape, index: list[ir.Value]) -> ir.Value:
    """The element offset of a multi-index in a dense buffer of `shape`.

    Adjacent digits x / n, x % n of a dimension pair with strides n*s, s (an index a reshape
    split out of one dimension: delinearize's digits) contribute x * s: the same offset, but
    one LLVM can compare with the same position reached without the split. An in-place
    elementwise loop through a reshape (attention's softmax division, [B*H, S, S] written
    over [B, H, S, S]) then reads and writes addresses LLVM sees are equal, and vectorizes
    without a run-time overlap check (which an exact overlap fails: the loop ran scalar)."""
    b = ctx.builder
    terms = _fold_digits([(index[d], stride) for d, stride in
                          sorted(enumerate(strides(shape)), key=lambda ds: -ds[1])
                          if shape.dims[d] != 1])  # the index is 0 there
    total: ir.Value | None = None
    for value, stride in terms:
        term = value if stride == 1 else b.mul(value, ctx.i64(stride), flags=["nsw"])
        total = term if total is None else b.add(total, term, flags=["nsw"])
    return total if total is not None else ctx.i64(0)


def _fold_digits(terms: list[tuple[ir.Value, int]]) -> list[tuple[ir.Value, int]]:
    """(value, stride) terms, major to minor, with every adjacent (x udiv n, n*s), (x urem n,
    s) pair replaced by (x, s), repeatedly (x = (x udiv n) * n + x urem n for x >= 0)."""
    out: list[tuple[ir.Value, int]] = []
    for value, stride in terms:
        out.append((value, stride))
        while len(out) >= 2:
            (hi, hs), (lo, ls) = out[-2], out[-1]
            x = split_of(hi, lo)
            if x is None or hs != ls * x[1]:
                break
            out[-2:] = [(x[0], ls)]
    return out


def split_of(hi: ir.Value, lo: ir.Value) -> tuple[ir.Value, int] | None:
    """(x, n) when hi is `x udiv n` and lo is `x urem n` for a constant n > 0."""
    if not (isinstance(hi, ir.Instruction) and isinstance(lo, ir.Instruction)):
        return None
    if hi.opname != "udiv" or lo.opname != "urem":
        return None
    (x, n), (y, m) = hi.operands, lo.operands
    if x is not y or not (isinstance(n, ir.Constant) and isinstance(m, ir.Constant)):
        return None
    if n.constant != m.constant or not isinstance(n.constant, int) or n.constant <= 0:
        return None
    return x, n.constant


def from_storage(ctx, et: ElemType, raw: ir.Value) -> ir.Value:
    b = ctx.builder
    if et.kind == "pred":
        return b.icmp_unsigned("!=", raw, ir.Constant(raw.type, 0))
    if et.is_narrow_float:
        return lowfloat.decode(ctx, et, raw)
    if et.is_integral and et.bits < raw.type.width:
        return b.trunc(raw, et.value_type)
    return raw


def to_storage(ctx, et: ElemType, value: ir.Value) -> ir.Value:
    b = ctx.builder
    if et.kind == "pred":
        return b.zext(value, et.storage_type)
    if et.is_narrow_float:
        return lowfloat.encode(ctx, et, value)
    if et.is_integral and et.bits < et.storage_type.width:
        # Sub-byte integers sit in the low bits of their byte (ml_dtypes' layout).
        return b.zext(value, et.storage_type)
    return value


def element_pointer(ctx, et: ElemType, base: ir.Value, offset: ir.Value) -> ir.Value:
    return ctx.builder.gep(base, [offset], inbounds=True, source_etype=et.storage_type)


def load_element(ctx, shape: Shape, base: ir.Value, index: list[ir.Value]) -> ir.Value:
    """Load element `index` of an array of `shape` at `base`, in register form."""
    et = elem_type(shape.element_type, complex_ok=True)
    ptr = element_pointer(ctx, et, base, linear_offset(ctx, shape, index))
    if et.is_complex:
        return load_complex(ctx, et, ptr)
    raw = ctx.builder.load(ptr, typ=et.storage_type)
    return from_storage(ctx, et, raw)


class ArrayGenerator:
    """The generator of an array in memory (a kernel's operand): `gen(index)` loads one
    element in register form, and `run(index, dim, count)` the `count` consecutive elements
    from `index` along `dim` as one vector, where that can be a single load (a plain element
    type, `dim` contiguous in the layout); else None. A small dot's tiles read their rhs
    rows this way: one vector load where the elementwise form was `count` loads and
    insertions that LLVM then had to merge (codegen/cpu/dot.py)."""

    def __init__(self, ctx, shape: Shape, base: ir.Value):
        self.ctx, self.shape, self.base = ctx, shape, base

    def __call__(self, index: list[ir.Value]) -> ir.Value:
        return load_element(self.ctx, self.shape, self.base, index)

    def run(self, index: list[ir.Value], dim: int, count: int) -> ir.Value | None:
        et = elem_type(self.shape.element_type, complex_ok=True)
        if (et.is_complex or et.value_type != et.storage_type or count < 2
                or strides(self.shape)[dim] != 1):
            return None
        ptr = element_pointer(self.ctx, et, self.base, linear_offset(self.ctx, self.shape, index))
        return self.ctx.builder.load(ptr, typ=ir.VectorType(et.value_type, count),
                                     align=et.bits // 8)


def store_element(ctx, shape: Shape, base: ir.Value, index: list[ir.Value], value) -> None:
    et = elem_type(shape.element_type, complex_ok=True)
    ptr = element_pointer(ctx, et, base, linear_offset(ctx, shape, index))
    if et.is_complex:
        store_complex(ctx, et, ptr, value)
        return
    ctx.builder.store(to_storage(ctx, et, value), ptr)


def _part_pointer(ctx, et: ElemType, ptr: ir.Value, k: int) -> ir.Value:
    zero, part = ir.Constant(I32, 0), ir.Constant(I32, k)
    return ctx.builder.gep(ptr, [zero, part], inbounds=True, source_etype=et.storage_type)


def load_complex(ctx, et: ElemType, ptr: ir.Value) -> ir.Value:
    """The complex number at `ptr` (real part first), as a {re, im} struct value."""
    b = ctx.builder
    re, im = (b.load(_part_pointer(ctx, et, ptr, k), typ=et.part.value_type) for k in range(2))
    return complex_ir.pair(b, et.value_type, re, im)


def store_complex(ctx, et: ElemType, ptr: ir.Value, value: ir.Value) -> None:
    for k, part in enumerate(complex_ir.parts(ctx.builder, value)):
        ctx.builder.store(part, _part_pointer(ctx, et, ptr, k))


def storage_bytes(shape: Shape, array: np.ndarray) -> bytes:
    """A literal's elements in row-major order as the bytes of their storage form."""
    import numpy as np

    et = elem_type(shape.element_type, complex_ok=True)
    arr = np.ascontiguousarray(array)
    if et.kind == "pred":
        return arr.astype(np.uint8).tobytes()
    if et.is_narrow_float or et.is_integral:
        width = et.storage_type.width // 8
        if arr.dtype.itemsize == width:
            return arr.view(f"u{width}").tobytes()
    return arr.tobytes()


def literal_table(ctx, key, shape: Shape, array: np.ndarray) -> ir.GlobalVariable:
    """A constant global holding a literal row-major (storage form)."""
    data = storage_bytes(shape, array)
    return ctx.bytes_table(key, data)


def row_major(shape: Shape) -> Shape:
    return Shape.array(shape.element_type, shape.dims)

