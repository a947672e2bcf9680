"""Gemm and Convolution thunks through BLAS (numpy.matmul) on arena views.

Gemm: the operands are viewed as [B, M, K] and [B, K, N] (transposes are free strides; BLAS
takes transposed operands directly) and numpy.matmul writes straight into the output slice
(`out=`). Convolution thunks: conv.py (window patches times the kernel, on the helpers
here). Views, scratch buffers and matrix shapes are fixed at load time.

Only same-dtype f32/f64/c64/c128 contractions, and bf16 ones with an f32 result (the
bf16-dot-operands pass), take these paths (XLA CPU computes those in their own type), and for
Gemm thunks int8 ones with an int32 result (the native GEMM's int8 form, f64 BLAS on widened
copies without it); others run the reference interpreter's implementation.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...buffers.assignment import Slice
from ...thunks.base import ThunkKind
from . import blas
from .host import build_host_step
from .program import LoadContext, Step, builds, op_names

_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                               np.complex128))
_BF16, _F32 = np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
_S8, _S32 = np.dtype(np.int8), np.dtype(np.int32)


def blas_dtype(*shapes) -> bool:
    """Whether a product of these operand and result shapes runs as a library product: one
    of BLAS' types throughout, or bf16 operands with an f32 result (the native GEMM's
    hloc_bgemm; widened copies through BLAS where there is none)."""
    dts = [s.np_dtype for s in shapes]
    if dts[:-1] == [_BF16] * (len(dts) - 1) and dts[-1] == _F32:
        return True
    return len(set(dts)) == 1 and dts[0] in _BLAS_DTYPES


def library_product(*shapes) -> bool:
    """Whether a Gemm thunk of these operand and result shapes runs as a library product:
    blas_dtype's, or int8 operands with an int32 result (codegen/cpu/dot.library_dot)."""
    dts = [s.np_dtype for s in shapes]
    return blas_dtype(*shapes) or (dts[:-1] == [_S8] * (len(dts) - 1) and dts[-1] == _S32)


def as_matrix(view: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """`view` reshaped without copying, or None when its strides do not allow it."""
    out = view.view()
    try:
        out.shape = shape
    except AttributeError:
        return None
    return out


class MatrixCell:
    """A memory cell seen as a matrix of `shape` after transposing by `perm`: `cell.a` is
    that matrix when strides allow a view (`fixed`), else the transposed view."""

    def __init__(self, ctx: LoadContext, s, hlo_shape, perm, shape: tuple[int, ...]):
        self.shape = shape

        def transform(view):
            moved = view.transpose(perm)
            matrix = as_matrix(moved, shape)
            return moved if matrix is None else matrix
        self.cell = ctx.memory.cell(s, hlo_shape, transform)
        self.fixed = self.cell.a.shape == shape  # strides only depend on the layout

    def operand(self) -> np.ndarray:
        a = self.cell.a
        return a if self.fixed else a.reshape(self.shape)


# Columns per block of strided_copy: one 32-byte run of f32 per row.
COPY_BLOCK = 8


def strided_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """np.copyto(dst, src) for a transposing copy: where either array's last axis is not
    contiguous, in blocks of COPY_BLOCK along it, which NumPy walks with far fewer cache
    misses. A convolution's input moved from (C, H, W, N) to (N, H, W, C) (a weight
    gradient's), 32x32x32x16 f32: 1.21 ms -> 0.61 ms; 32x16x16x32: 0.69 -> 0.33 ms."""
    n = dst.shape[-1] if dst.ndim and src.ndim == dst.ndim else 0
    if n <= COPY_BLOCK or (dst.strides[-1] == dst.itemsize and src.strides[-1] == src.itemsize):
        np.copyto(dst, src)
        return
    for lo in range(0, n, COPY_BLOCK):
        np.copyto(dst[..., lo:lo + COPY_BLOCK], src[..., lo:lo + COPY_BLOCK])


class _Scratch:
    """A load-time matrix standing in for a MatrixCell that is no matrix view."""

    def __init__(self, cell: MatrixCell):
        self.a = np.empty(cell.shape, cell.cell.a.dtype)
        self.source = cell.cell  # its `a` (the transposed view) may be rebound between runs

    def fill(self) -> None:
        strided_copy(self.a.reshape(self.source.a.shape), self.source.a)

    def spill(self) -> None:
        strided_copy(self.source.a, self.a.reshape(self.source.a.shape))


def matmul_runner(a: MatrixCell, b: MatrixCell, out: MatrixCell, flops: int):
    """A runner computing out = a @ b.

    Operands that are no matrix view are copied into scratch matrices fixed at load time, so
    every product takes blas.product_runner (pool pieces with one BLAS thread each). Before,
    these ran numpy.matmul on OpenBLAS' own threads, which stall at their barriers whenever
    another process holds a core: backward convolutions (the weight-gradient ones, whose
    kernel operand is a transposed activation gradient) then took 10-20x their time."""
    batch = a.shape[0] if len(a.shape) == 3 else None
    cells = [c.cell if c.fixed else _Scratch(c) for c in (a, b, out)]
    ca, cb, co = cells  # unpacked: mypy cannot count the arguments of *cells
    product = blas.product_runner(ca, cb, co, batch, a.shape[-2], b.shape[-1], flops)
    fills = [c.fill for c in cells[:2] if isinstance(c, _Scratch)]
    if not fills and out.fixed:
        return product
    spill = cells[2].spill if isinstance(cells[2], _Scratch) else None

    def run() -> None:
        for fill in fills:
            fill()
        product()
        if spill is not None:
            spill()
    return run


def _matrices(ctx: LoadContext, thunk, instr):
    """(a, b, out, batch, m, n, k): a Gemm thunk's operands and result as [B,]M,K @ [B,]K,N ->
    [B,]M,N MatrixCells (transposes are free strides)."""
    lhs_s, rhs_s = (o.shape for o in instr.operands)
    lb, lc, rb, rc = (list(x) for x in (thunk.lhs_batch, thunk.lhs_contracting,
                                        thunk.rhs_batch, thunk.rhs_contracting))
    lf = [d for d in range(lhs_s.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs_s.rank) if d not in rb and d not in rc]
    batch = math.prod(lhs_s.dims[d] for d in lb)
    m = math.prod(lhs_s.dims[d] for d in lf)
    k = math.prod(lhs_s.dims[d] for d in lc)
    n = math.prod(rhs_s.dims[d] for d in rf)
    # Without batch dimensions the 2-D form lets BLAS see one matrix product.
    lead = (batch,) if lb else ()
    a = MatrixCell(ctx, thunk.lhs, lhs_s, lb + lf + lc, lead + (m, k))
    b = MatrixCell(ctx, thunk.rhs, rhs_s, rb + rc + rf, lead + (k, n))
    out = MatrixCell(ctx, thunk.output, instr.shape, list(range(instr.shape.rank)),
                     lead + (m, n))
    return a, b, out, batch, m, n, k


@builds(ThunkKind.GEMM)
def build_gemm(ctx: LoadContext, thunk) -> Step:
    instr = ctx.instruction(thunk.name)
    if not library_product(*(o.shape for o in instr.operands), instr.shape):
        return build_host_step(ctx, thunk)
    a, b, out, batch, m, n, k = _matrices(ctx, thunk, instr)
    run = matmul_runner(a, b, out, 2 * batch * m * n * k)
    return Step(thunk.name, "gemm", op_names(ctx, thunk.name), run)


def native_product_list(ctx: LoadContext, thunk):
    """The address of a Gemm thunk's job for hloc_sgemm_job (a native driver calls it: one
    list, or pieces shared with the native pool when the product is big enough), or None where the native GEMM cannot compute it in place (another dtype, operands
    that are no matrix views, no native GEMM on this host). Operand addresses follow their
    allocations when these are rebound for a run."""
    from . import gemm

    instr = ctx.instruction(thunk.name)
    if not library_product(*(o.shape for o in instr.operands), instr.shape):
        return None
    a, b, out, batch, m, n, _ = _matrices(ctx, thunk, instr)
    if not (a.fixed and b.fixed and out.fixed):
        return None
    product = gemm.product_describer(a.cell, b.cell, out.cell)
    if product is None:
        return None
    ranges = blas.native_ranges(batch, m, n, 2 * batch * m * n * a.shape[-1])
    whole = product(0, batch, 0, m, 0, n)
    lists = [gemm.product_list([product(*r)], ctx.gemm_work()) for r in ranges]
    # Each operand's matrix view starts at its slice, a piece's some bytes into it: both are
    # re-pointed with their allocation.
    for (words, _), r in zip(lists, ranges, strict=True):
        piece = product(*r)
        for s, word in ((thunk.lhs, 4), (thunk.rhs, 7), (thunk.output, 10)):
            skip = piece[word] - whole[word]
            ctx.memory.pointer(Slice(s.allocation, s.offset + skip, s.size - skip), words,
                               2 + word)
    job = gemm.product_job(lists, gemm.pool_address())
    ctx.keep_alive.append(job)
    return job[1].value
