"""Small triangular solves as kernels: jax's LAPACK trsm call (`lapack_{s,d}trsm_ffi`) on
matrices of order up to MAX_ORDER.

LAPACK's trsm is built for big matrices: OpenBLAS took 72 us to solve one 16 x 16 triangle
against 2048 right-hand sides (7 GFLOP/s on two threads, 4 on one), and a Gaussian mixture's
log-likelihood spent 1.4 of its 1.6 ms in eight such calls. Here the solve is a kernel:
substitution with the right-hand sides as the vectorized loop.

With T = op(a) (a's triangle, transposed for trans_x T or C, the diagonal taken as ones for
diag U), the left-side call solves T x = b: row i of x is (b_i - sum_k T[i, k] x_k) / T[i, i]
over the rows k solved before it (those above i for a lower T, in increasing k, below it for
an upper T, in decreasing k), every right-hand side (column of b) alike. The right-side call
solves x T = b, that is T^T x^T = b^T: the same with columns of x as the lines and rows as
the right-hand sides. Each line is combined in that order, a multiply and a subtract a term,
then divided by the diagonal, as reference LAPACK's column sweeps combine each element; only
the rounding of LAPACK's blocked kernels differs.

A work unit is one matrix of the batch and a block of up to BLOCK right-hand sides, their
partial sums on the stack: lines are solved in order inside the unit, each summed over the
lines before it in one loop over the block (contiguous where the right-hand sides run along
the minor dimension, as they do for a left-side solve in row-major buffers).
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
BLOCK = 256  # right-hand sides a work unit
_TYPES = {"lapack_strsm_ffi": PrimitiveType.F32, "lapack_dtrsm_ffi": PrimitiveType.F64}


@dataclass(frozen=True)
class Solve:
    """A triangular solve in kernel terms: line i of x is solved from the lines before it;
    T[i, k] is a's element (i, k), or (k, i) where `swapped`."""

    left: bool
    forward: bool  # T is lower: lines in increasing order
    swapped: bool
    unit: bool
    n: int


def as_solve(instr: Instruction) -> Solve | None:
    """The solve a trsm custom call makes, or None (not one, another type, batch dimensions
    that differ, a matrix above MAX_ORDER, an option LAPACK would reject)."""
    ptype = _TYPES.get(instr.attrs.custom_call_target or "")
    if ptype is None or len(instr.operands) != 2 or not instr.shape.is_array:
        return None
    a, b = (op.shape for op in instr.operands)
    if not (a.is_array and b.is_array) or any(s.element_type != ptype
                                              for s in (a, b, instr.shape)):
        return None
    if a.rank != b.rank or a.rank < 2 or a.dims[:-2] != b.dims[:-2] or b.dims != instr.shape.dims:
        return None
    n = a.dims[-1]
    o = lapack_options(instr)
    side, uplo = o.get("side", "L"), o.get("uplo", "L")
    trans, diag = o.get("trans_x", "N"), o.get("diag", "N")
    if side not in "LR" or uplo not in "LU" or trans not in "NTC" or diag not in "NU":
        return None
    left = side == "L"
    if a.dims[-2] != n or b.dims[-2 if left else -1] != n or n > MAX_ORDER:
        return None
    transposed = trans != "N"
    # The right-side solve x T = b is T^T x^T = b^T: one more transpose.
    swapped = transposed != (not left)
    lower = (uplo == "L") != swapped
    return Solve(left, lower, swapped, diag == "U", n)


class TrsmSegment(Segment):
    kind = "trsm"

    def __init__(self, spec: KernelSpec, item: RootItem, solve: Solve):
        self.spec, self.item, self.solve = spec, item, solve
        out = spec.output_shapes[item.outputs[0]]
        rank = out.rank
        self.line_dim = rank - 2 if solve.left else rank - 1  # the solved dimension
        self.rhs_dim = rank - 1 if solve.left else rank - 2
        batch = [d for d in major_to_minor(out) if d < rank - 2]
        self.units = RowBlocks.of(out, batch, self.rhs_dim, BLOCK)
        self.extent = self.units.extent if solve.n and out.dims[self.rhs_dim] else 0
        self.value_type = elem_type(out.element_type).value_type

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx, b = kb.ctx, kb.ctx.builder
        solve, n = self.solve, self.solve.n
        instr = self.item.instr
        (a_shape, b_shape) = (kb.spec.operand_shapes[op.attrs.parameter_number]
                              for op in instr.operands)
        a_ptr, b_ptr = (kb.operands[op.attrs.parameter_number] for op in instr.operands)
        x_shape = self.spec.output_shapes[self.item.outputs[0]]
        x_ptr = kb.outputs[self.item.outputs[0]]
        acc = ctx.alloca(self.value_type, self.units.block, "trsm.acc")

        def at(index, line, rhs):
            out = list(index)
            out[self.line_dim], out[self.rhs_dim] = line, rhs
            return out

        def t_element(index, i, k):
            out = list(index)
            out[-2], out[-1] = (k, i) if solve.swapped else (i, k)
            return load_element(ctx, a_shape, a_ptr, out)

        def slot(p, start):
            return b.gep(acc, [b.sub(p, start)], inbounds=True, source_etype=self.value_type)

        with ctx.loop(lo, hi, "unit") as unit:
            index, start, stop = self.units.unit(ctx, unit)
            with ctx.loop(0, n, "line") as step:
                i = step if solve.forward else b.sub(ctx.i64(n - 1), step)
                with ctx.loop(start, stop, "rhs") as p:
                    b.store(load_element(ctx, b_shape, b_ptr, at(index, i, p)), slot(p, start))
                with ctx.loop(0, step, "term") as q:  # the lines solved before line i
                    k = q if solve.forward else b.sub(ctx.i64(n - 1), q)
                    t = t_element(index, i, k)
                    with ctx.loop(start, stop, "rhs") as p:
                        ptr = slot(p, start)
                        x_k = load_element(ctx, x_shape, x_ptr, at(index, k, p))
                        b.store(b.fsub(b.load(ptr, typ=self.value_type), b.fmul(t, x_k)), ptr)
                diagonal = None if solve.unit else t_element(index, i, i)
                with ctx.loop(start, stop, "rhs") as p:
                    value = b.load(slot(p, start), typ=self.value_type)
                    if diagonal is not None:
                        value = b.fdiv(value, diagonal)
                    store_element(ctx, x_shape, x_ptr, at(index, i, p), value)


def _plan(spec: KernelSpec, item: RootItem) -> Segment | None:
    solve = as_solve(item.instr)
    if solve is None:
        return None
    # In place (jax's calls alias x with b), line by line: only where both have one layout.
    if any(spec.operand_shapes[k] != spec.output_shapes[out] for out, k in spec.aliases):
        return None
    return TrsmSegment(spec, item, solve)


def trsm_work(instr: Instruction) -> int:
    """A multiply and a subtract per term: n (n - 1) / 2 terms per right-hand side, plus
    the division and the copies of each element."""
    return math.prod(instr.shape.dims) * (instr.operands[0].shape.dims[-1] + 3)


CUSTOM_CALL_KERNELS.register(*_TYPES)(
    CustomCallKernel(lambda instr: as_solve(instr) is not None, _plan, trsm_work))
