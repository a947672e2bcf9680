"""Small Cholesky factorizations as kernels: jax's LAPACK potrf call (`lapack_{s,d}potrf_ffi`)
on matrices of order up to MAX_ORDER.

LAPACK runs one call per matrix of a batch, one after another: 128 factorizations of 64 x 64
took 1.7 ms (13.5 us each, 6.5 GFLOP/s on one thread). Here a work unit is one matrix, so a
batch splits over the cores, and each step's update is a vectorized loop.

The factorization is right-looking on the asked-for triangle, seen as a lower one: L(r, c) for
c <= r is element (r, c) of the matrix for uplo L and (c, r) for uplo U (U = L^T). Step j
takes d = L(j, j), already reduced by the steps before it; if d is not positive (or is NaN)
the factorization stops there and, as jax's LAPACK kernel reports it, the whole asked-for
triangle becomes NaN and the matrix's status is 1 (runtime/lapack.py's potrf: the same);
else L(j, j) = sqrt(d), the column below it is divided by that and copied to the stack, and every
L(i, c) with j < c <= i loses L(i, j) L(c, j). The update's inner loop runs along whichever
of r and c is contiguous in memory (rows of L for a row-major lower triangle, columns for a
column-major one), both reading the column from the stack: the same operations in the same
order either way. The other triangle is not touched (copied from the operand where the
output is not written in place), the status of each matrix is its `info` output.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Instruction, PrimitiveType
from ...ir.custom_calls import lapack_options
from ...util.record import dataclass
from ..elemental.memory import load_element, major_to_minor, store_element
from ..elemental.types import elem_type
from .custom_calls import CUSTOM_CALL_KERNELS, CustomCallKernel
from .kernel import KernelBuild, RootItem, Segment
from .kernel_spec import KernelSpec
from .row_blocks import RowBlocks

# Matrices of larger order stay with LAPACK, whose blocked kernels keep big triangles in cache.
MAX_ORDER = 128
_TYPES = {"lapack_spotrf_ffi": PrimitiveType.F32, "lapack_dpotrf_ffi": PrimitiveType.F64}
_I32 = ir.IntType(32)


@dataclass(frozen=True)
class Factor:
    lower: bool  # uplo L: the factor is the lower triangle
    n: int


def as_factor(instr: Instruction) -> Factor | None:
    """The factorization a potrf custom call asks for, or None (not one, another type or
    result form, a matrix above MAX_ORDER, an option LAPACK would reject)."""
    ptype = _TYPES.get(instr.attrs.custom_call_target or "")
    if ptype is None or len(instr.operands) != 1 or not instr.shape.is_tuple:
        return None
    a = instr.operands[0].shape
    if len(instr.shape.tuple_shapes) != 2 or not a.is_array or a.rank < 2:
        return None
    out, info = instr.shape.tuple_shapes
    n = a.dims[-1]
    if (a.element_type != ptype or out.element_type != ptype or out.dims != a.dims
            or a.dims[-2] != n or n > MAX_ORDER
            or info.element_type != PrimitiveType.S32 or info.dims != a.dims[:-2]):
        return None
    uplo = lapack_options(instr).get("uplo", "L")
    return Factor(uplo == "L", n) if uplo in ("L", "U") else None


class PotrfSegment(Segment):
    kind = "potrf"

    def __init__(self, spec: KernelSpec, item: RootItem, factor: Factor, in_place: bool):
        self.spec, self.item, self.factor, self.in_place = spec, item, factor, in_place
        out = spec.output_shapes[item.outputs[0]]
        rank = out.rank
        self.units = RowBlocks.of(out, [d for d in major_to_minor(out) if d < rank - 2], None, 1)
        self.extent = self.units.extent if factor.n else 0
        self.value_type = elem_type(out.element_type).value_type
        # Whether L's rows are contiguous: L(r, c) is (r, c) for a lower factor, (c, r) for
        # an upper one, and the matrix's last dimension is the minor one or not.
        last_minor = major_to_minor(out)[-1] == rank - 1
        self.by_rows = last_minor == factor.lower

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx, b = kb.ctx, kb.ctx.builder
        n, vt = self.factor.n, self.value_type
        (param,) = (op.attrs.parameter_number for op in self.item.instr.operands)
        a_shape, a_ptr = kb.spec.operand_shapes[param], kb.operands[param]
        out_k, info_k = self.item.outputs
        x_shape, x_ptr = self.spec.output_shapes[out_k], kb.outputs[out_k]
        info_shape, info_ptr = self.spec.output_shapes[info_k], kb.outputs[info_k]
        column = ctx.alloca(vt, n, "potrf.column")
        status = ctx.alloca(_I32, 1, "potrf.status")
        sqrt = f"llvm.sqrt.{'f32' if vt == ir.FloatType() else 'f64'}"

        def at(index, r, c):
            out = list(index)
            out[-2], out[-1] = (r, c) if self.factor.lower else (c, r)
            return out

        def stacked(i):
            return b.gep(column, [i], inbounds=True, source_etype=vt)

        with ctx.loop(lo, hi, "unit") as unit:
            index, _, _ = self.units.unit(ctx, unit)

            def element(r, c):
                return load_element(ctx, x_shape, x_ptr, at(index, r, c))

            def update(r, c, value):
                store_element(ctx, x_shape, x_ptr, at(index, r, c), value)

            if not self.in_place:
                with ctx.loop(0, n, "row") as r:
                    with ctx.loop(0, n, "col") as c:
                        where = list(index)
                        where[-2], where[-1] = r, c
                        store_element(ctx, x_shape, x_ptr, where,
                                      load_element(ctx, a_shape, a_ptr, where))
            b.store(ir.Constant(_I32, 0), status)
            with ctx.loop(0, n, "step") as j:
                running = b.icmp_unsigned("==", b.load(status, typ=_I32), ir.Constant(_I32, 0))
                with b.if_then(running):
                    d = element(j, j)
                    with b.if_else(b.fcmp_ordered(">", d, ir.Constant(vt, 0.0))) as (ok, failed):
                        with ok:
                            self._step(ctx, j, ctx.call(sqrt, [d]), element, update, stacked)
                        with failed:
                            b.store(ir.Constant(_I32, 1), status)
            final = b.load(status, typ=_I32)
            with b.if_then(b.icmp_unsigned("!=", final, ir.Constant(_I32, 0))):
                with ctx.loop(0, n, "row") as r:
                    with ctx.loop(0, b.add(r, ctx.i64(1)), "col") as c:
                        update(r, c, ir.Constant(vt, float("nan")))
            store_element(ctx, info_shape, info_ptr, index[:-2], final)

    def _step(self, ctx, j, root, element, update, stacked) -> None:
        """Step j once its pivot is positive: the column scaled, the trailing triangle
        updated from the column's copy on the stack."""
        b, n, vt = ctx.builder, self.factor.n, self.value_type
        update(j, j, root)
        after = b.add(j, ctx.i64(1))
        with ctx.loop(after, n, "below") as i:
            value = b.fdiv(element(i, j), root)
            update(i, j, value)
            b.store(value, stacked(i))

        def subtract(i, c, times):
            update(i, c, b.fsub(element(i, c), b.fmul(b.load(stacked(i), typ=vt), times)))

        if self.by_rows:  # L(i, c) for c in (j, i]: along row i
            with ctx.loop(after, n, "row") as i:
                with ctx.loop(after, b.add(i, ctx.i64(1)), "col") as c:
                    subtract(i, c, b.load(stacked(c), typ=vt))
        else:  # L(i, c) for i in [c, n): down column c
            with ctx.loop(after, n, "col") as c:
                times = b.load(stacked(c), typ=vt)
                with ctx.loop(c, n, "row") as i:
                    subtract(i, c, times)


def _plan(spec: KernelSpec, item: RootItem) -> Segment | None:
    factor = as_factor(item.instr)
    if factor is None:
        return None
    (param,) = (op.attrs.parameter_number for op in item.instr.operands)
    out = item.outputs[0]
    in_place = (out, param) in spec.aliases
    # In place step by step: only where operand and output have one layout.
    if any(spec.operand_shapes[k] != spec.output_shapes[o] for o, k in spec.aliases):
        return None
    return PotrfSegment(spec, item, factor, in_place)


def potrf_work(instr: Instruction) -> int:
    """n^3 / 3 multiply-adds a matrix, plus the copy of its n^2 elements."""
    dims = instr.operands[0].shape.dims
    n = dims[-1]
    return math.prod(dims[:-2]) * (n * n * n // 3 + n * n)


CUSTOM_CALL_KERNELS.register(*_TYPES)(
    CustomCallKernel(lambda instr: as_factor(instr) is not None, _plan, potrf_work))
