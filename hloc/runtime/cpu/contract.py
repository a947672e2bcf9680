"""Gemm and Convolution thunks through BLAS (numpy.matmul) on arena views.

Gemm: the operands are viewed as [B, M, K] and [B, K, N] (transposes are free strides; BLAS
takes transposed operands directly) and numpy.matmul writes straight into the output slice
(`out=`). Convolution: im2col — the padded input's windows are gathered into a preallocated
[N*OUT, WINDOW*C] matrix (one strided copy) and multiplied by the kernel viewed as
[WINDOW*C, O]. Views, scratch buffers and matrix shapes are fixed at load time.

Only same-dtype f32/f64/c64/c128 contractions take these paths (XLA CPU computes those in
their own type); others run the reference interpreter's implementation.
"""

from __future__ import annotations

import math

import numpy as np

from . import blas
from .host import build_host_step
from .program import LoadContext, Step, builds, op_names

_BLAS_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64,
                                               np.complex128))


def blas_dtype(*shapes) -> bool:
    dts = {s.np_dtype for s in shapes}
    return len(dts) == 1 and dts <= _BLAS_DTYPES


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


def matmul_runner(a: MatrixCell, b: MatrixCell, out: MatrixCell, flops: int):
    """A runner computing out = a @ b."""
    if a.fixed and b.fixed and out.fixed:
        batch = a.shape[0] if len(a.shape) == 3 else None
        return blas.product_runner(a.cell, b.cell, out.cell, batch, a.shape[-2], b.shape[-1],
                                   flops)

    def run_general() -> None:
        product = np.matmul(a.operand(), b.operand())
        if out.fixed:
            np.copyto(out.cell.a, product)
        else:
            np.copyto(out.cell.a, product.reshape(out.cell.a.shape))
    return blas.single_threaded(run_general, flops)


@builds("gemm")
def build_gemm(ctx: LoadContext, thunk) -> Step:
    instr = ctx.instruction(thunk.name)
    lhs_s, rhs_s = (o.shape for o in instr.operands)
    if not blas_dtype(lhs_s, rhs_s, instr.shape):
        return build_host_step(ctx, thunk)
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
    run = matmul_runner(a, b, out, 2 * batch * m * n * k)
    return Step(thunk.name, "gemm", op_names(ctx, thunk.name), run)


# ---- convolution ------------------------------------------------------------------------------

def conv_fast_path(instr) -> bool:
    """Ungrouped, unreversed, non-negatively padded, no input dilation, BLAS dtype."""
    a = instr.attrs
    if (a.feature_group_count or 1) != 1 or (a.batch_group_count or 1) != 1:
        return False
    dims = a.window.dims if a.window is not None else ()
    if any(w.base_dilation != 1 or w.window_reversal or w.padding_low < 0 or w.padding_high < 0
           for w in dims):
        return False
    if instr.shape.num_elements == 0 or instr.operands[0].shape.num_elements == 0:
        return False
    return blas_dtype(instr.operands[0].shape, instr.operands[1].shape, instr.shape)


@builds("convolution")
def build_convolution(ctx: LoadContext, thunk) -> Step:
    instr = ctx.instruction(thunk.name)
    if not conv_fast_path(instr):
        return build_host_step(ctx, thunk)
    run = convolution_runner(ctx, instr, thunk.input, thunk.kernel, thunk.output)
    return Step(thunk.name, "convolution", op_names(ctx, thunk.name), run)


def convolution_runner(ctx: LoadContext, instr, input_slice, kernel_slice, output_slice):
    dn = instr.attrs.conv_dnums
    window = instr.attrs.window.dims if instr.attrs.window is not None else ()
    in_perm = [dn.input_batch_dimension, *dn.input_spatial_dimensions, dn.input_feature_dimension]
    k_perm = [*dn.kernel_spatial_dimensions, dn.kernel_input_feature_dimension,
              dn.kernel_output_feature_dimension]
    out_perm = [dn.output_batch_dimension, *dn.output_spatial_dimensions,
                dn.output_feature_dimension]
    in_shape, out_shape = instr.operands[0].shape, instr.shape
    x_dims = [in_shape.dims[d] for d in in_perm]
    y_dims = [out_shape.dims[d] for d in out_perm]
    taps = math.prod(wd.size for wd in window) * x_dims[-1]
    rows = math.prod(y_dims[:-1])
    kernel = MatrixCell(ctx, kernel_slice, instr.operands[1].shape, k_perm, (taps, y_dims[-1]))
    out = MatrixCell(ctx, output_slice, out_shape, out_perm, (rows, y_dims[-1]))
    flops = 2 * rows * taps * y_dims[-1]
    if _is_pointwise(window, x_dims, y_dims):
        cols = MatrixCell(ctx, input_slice, in_shape, in_perm, (rows, taps))
        return matmul_runner(cols, kernel, out, flops)
    x = ctx.memory.cell(input_slice, in_shape, lambda v: v.transpose(in_perm))
    direct = _direct_convolution(ctx, instr, x, x_dims, y_dims, window, kernel_slice, k_perm,
                                 output_slice, out_perm)
    if direct is not None:
        return direct
    gather, matrix = _im2col(x, x_dims, window, y_dims[1:-1])
    cols = _FixedMatrix(matrix.reshape(rows, taps))
    product = matmul_runner(cols, kernel, out, flops)

    def run() -> None:
        gather()
        product()
    return run


class _FixedMatrix:
    """A scratch matrix in the shape of a MatrixCell (never rebound)."""

    def __init__(self, matrix: np.ndarray):
        self.shape = matrix.shape
        self.fixed = True
        self.cell = self
        self.a = matrix

    def operand(self) -> np.ndarray:
        return self.a


def _is_pointwise(window, x_dims, y_dims) -> bool:
    return all(wd.size == 1 and wd.stride == 1 and wd.padding_low == 0 and wd.padding_high == 0
               for wd in window) and list(x_dims[1:-1]) == list(y_dims[1:-1])


def _padded_input(x_dims, window, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(zero-padded (N, *spatial, C) buffer, its interior view): the borders stay zero, the
    interior is copied from the input on every run."""
    padded = [x_dims[0], *(n + wd.padding_low + wd.padding_high
                           for n, wd in zip(x_dims[1:-1], window, strict=True)), x_dims[-1]]
    xp = np.zeros(padded, dtype)
    interior = xp[(slice(None), *(slice(wd.padding_low, wd.padding_low + n)
                                  for n, wd in zip(x_dims[1:-1], window, strict=True)))]
    return xp, interior


def _im2col(x, x_dims, window, out_spatial):
    """(runner filling the matrix, the (N, *OUT, *WINDOW, C) im2col matrix)."""
    ns = len(window)
    dtype = x.a.dtype
    xp, interior = _padded_input(x_dims, window, dtype)
    spans = [(wd.size - 1) * wd.window_dilation + 1 for wd in window]
    view = np.lib.stride_tricks.sliding_window_view(xp, spans, axis=tuple(range(1, 1 + ns)))
    sel = (slice(None), *(slice(0, o * wd.stride, wd.stride)
                          for o, wd in zip(out_spatial, window, strict=True)),
           slice(None), *(slice(None, None, wd.window_dilation) for wd in window))
    # (N, *OUT, C, *WINDOW) -> (N, *OUT, *WINDOW, C): C stays the contiguous axis.
    patches = view[sel].transpose([0, *range(1, 1 + ns), *range(2 + ns, 2 + 2 * ns), 1 + ns])
    matrix = np.empty(patches.shape, dtype)

    def gather() -> None:
        np.copyto(interior, x.a)
        np.copyto(matrix, patches)
    return gather, matrix


# ---- direct 2-D convolution through the native GEMM ------------------------------------------

def _direct_convolution(ctx: LoadContext, instr, x, x_dims, y_dims, window, kernel_slice, k_perm,
                        output_slice, out_perm):
    """A 2-D f32 convolution without im2col, or None where this form does not apply.

    With the input zero-padded into (N, HP, WP, C), one kernel row i contributes
    out[n, oh, ow, :] += sum over (j, c) of xp[n, oh*sh + i*dh, ow*sw + j, c] * w[i, j, c, :],
    and for a fixed (n, oh) the (j, c) run is contiguous in xp (no window dilation along W).
    So every (image, kernel row) is one batched GEMM over oh with rows ow (row stride sw*C)
    and depth KW*C, straight from the padded input: the im2col matrix (KH*KW times the input)
    is never written, which made the im2col path memory-bound.
    """
    from . import gemm, parallel

    lib = gemm.native()
    if lib is None or len(window) != 2 or window[1].window_dilation != 1 \
            or x.a.dtype != np.float32:
        return None
    kh, kw = (wd.size for wd in window)
    c, o = x_dims[-1], y_dims[-1]
    kernel = MatrixCell(ctx, kernel_slice, instr.operands[1].shape, k_perm, (kh, kw * c, o))
    out = ctx.memory.cell(output_slice, instr.shape, lambda v: v.transpose(out_perm))
    if not kernel.fixed or kernel.cell.a.strides[2] != 4 or out.a.strides[3] != 4 \
            or any(s % 4 for s in kernel.cell.a.strides + out.a.strides):
        return None
    xp, interior = _padded_input(x_dims, window, np.float32)
    fn, work = lib
    row = xp.shape[2] * c  # elements per padded input row
    sa, lda = window[0].stride * row, window[1].stride * c
    oh, ow = y_dims[1], y_dims[2]
    k_strides = [s // 4 for s in kernel.cell.a.strides]
    o_strides = [s // 4 for s in out.a.strides]
    image, base = xp.shape[1] * row, xp.ctypes.data

    def images(n0: int, n1: int) -> None:
        """Images [n0, n1): kernel row 0 overwrites the output, the others add to it."""
        kp, op = gemm.address(kernel.cell.a), gemm.address(out.a)
        for n in range(n0, n1):
            for i in range(kh):
                a = base + 4 * (n * image + i * window[0].window_dilation * row)
                fn(oh, ow, o, kw * c, a, sa, lda, kp + 4 * i * k_strides[0], 0, k_strides[1],
                   op + 4 * n * o_strides[0], o_strides[1], o_strides[2], work(), i)

    pool = parallel.pool()
    pieces = parallel.split(x_dims[0], pool.threads * parallel.CHUNKS_PER_THREAD)

    def run() -> None:
        np.copyto(interior, x.a)
        pool.run(images, pieces)
    run.keep_alive = xp
    return run
