"""Convolution thunks on the host: products of window patches through BLAS / the native GEMM.

Every form with a BLAS dtype (one of f32/f64/c64/c128 throughout) runs here; other dtypes and
empty operands run the reference interpreter. Views, scratch buffers and matrix shapes are
fixed at load time, so a run is a few copies and one product.

- The input is copied into a zero buffer laid out (N, *spatial, C) that already holds the
  padding and base dilation (negative padding crops the input instead), so every window tap
  is a plain strided view of it.
- A 1x1 window that keeps the spatial size is one product: the input as [N*S, C] by the
  kernel as [C, O].
- A 2-D f32 convolution on AVX2 hosts runs the native implicit-GEMM kernel over the padded
  input (conv_native.py); on AVX-512 hosts one native GEMM per (image, kernel row) straight
  from the padded input (`_direct_convolution`). Neither writes an im2col matrix.
- A 1-D f32 convolution is one native GEMM per image straight from the padded input where
  its taps are adjacent (`_direct_convolution_1d`), else one per (image, tap), each adding
  to the output (dilated, WaveNet-style): no im2col matrix either.
- Everything else is im2col: the patches are gathered into a [BG, G, Nb*OUT, WINDOW*Cg]
  matrix (one strided copy) and multiplied by the kernel as [BG, G, WINDOW*Cg, Og]; feature
  groups (G) and batch groups (BG) are the batches of that product, window reversal reads
  the patches' taps backwards.
"""

from __future__ import annotations

import math

import numpy as np

from ...codegen.cpu.gemm import ACCUMULATE
from ...thunks.base import ThunkKind
from ...util.record import dataclass
from . import blas
from .contract import MatrixCell, _Scratch, blas_dtype, matmul_runner, strided_copy
from .host import build_host_step
from .program import LoadContext, Step, builds, op_names


@dataclass(frozen=True)
class ConvForm:
    """A convolution seen as (N, *spatial, C) input, (*window, Cg, O) kernel and
    (Nb, *spatial, O) output views: the transposes to get there and the sizes."""

    in_perm: list[int]
    k_perm: list[int]
    out_perm: list[int]
    x_dims: list[int]  # N, *spatial, C
    y_dims: list[int]  # Nb, *spatial, O
    window: tuple
    groups: int
    batch_groups: int

    @staticmethod
    def of(instr) -> ConvForm:
        dn = instr.attrs.conv_dnums
        in_perm = [dn.input_batch_dimension, *dn.input_spatial_dimensions,
                   dn.input_feature_dimension]
        out_perm = [dn.output_batch_dimension, *dn.output_spatial_dimensions,
                    dn.output_feature_dimension]
        k_perm = [*dn.kernel_spatial_dimensions, dn.kernel_input_feature_dimension,
                  dn.kernel_output_feature_dimension]
        window = instr.attrs.window.dims if instr.attrs.window is not None else ()
        return ConvForm(in_perm, k_perm, out_perm,
                        [instr.operands[0].shape.dims[d] for d in in_perm],
                        [instr.shape.dims[d] for d in out_perm], tuple(window),
                        instr.attrs.feature_group_count or 1, instr.attrs.batch_group_count or 1)

    @property
    def plain(self) -> bool:
        """No groups and no reversed taps: the kernel is one [WINDOW*C, O] matrix."""
        return self.groups == 1 and self.batch_groups == 1 and \
            not any(wd.window_reversal for wd in self.window)

    @property
    def taps(self) -> int:
        return math.prod(wd.size for wd in self.window)


def host_convolution(instr) -> bool:
    """Whether this module runs the convolution (else the reference interpreter does)."""
    shapes = (instr.shape, *(o.shape for o in instr.operands))
    return blas_dtype(*shapes) and all(s.num_elements > 0 for s in shapes)


@builds(ThunkKind.CONVOLUTION)
def build_convolution(ctx: LoadContext, thunk) -> Step:
    instr = ctx.instruction(thunk.name)
    if not host_convolution(instr):
        return build_host_step(ctx, thunk)
    run = convolution_runner(ctx, instr, thunk.input, thunk.kernel, thunk.output)
    return Step(thunk.name, "convolution", op_names(ctx, thunk.name), run)


def convolution_runner(ctx: LoadContext, instr, input_slice, kernel_slice, output_slice):
    form = ConvForm.of(instr)
    x = ctx.memory.cell(input_slice, instr.operands[0].shape,
                        lambda v: v.transpose(form.in_perm))
    if not form.plain:
        return _grouped_im2col(ctx, instr, form, x, kernel_slice, output_slice)
    return _plain_runner(ctx, instr, form, x, input_slice, kernel_slice, output_slice)


def fused_convolution(ctx: LoadContext, thunk, step: dict, slice_of):
    """A composite's convolution step computing its epilogue too (the step's "epilogue",
    codegen/cpu/conv_epilogue.py) straight into the output, or None where only the two
    steps can run it (no epilogue, another convolution form, no native kernel)."""
    from .conv_native import conv_runner, epilogue_ops

    epilogue = step.get("epilogue") if step.get("kind") == "convolution" else None
    if epilogue is None:
        return None
    instr = ctx.instruction(step["instruction"])
    form = ConvForm.of(instr)
    fusion = ctx.instruction(thunk.name)
    ops = epilogue_ops(epilogue["ops"], slice_of, [o.shape for o in fusion.operands])
    if ops is None or not (host_convolution(instr) and form.plain):
        return None
    x = ctx.memory.cell(slice_of(step["input"]), instr.operands[0].shape,
                        lambda v: v.transpose(form.in_perm))
    return conv_runner(ctx, instr, form, x, slice_of(step["kernel"]),
                       slice_of(epilogue["output"]), ops)


def _plain_runner(ctx: LoadContext, instr, form: ConvForm, x, input_slice, kernel_slice,
                  output_slice):
    """Ungrouped, unreversed: a pointwise product, the direct form or im2col."""
    taps = form.taps * form.x_dims[-1]
    rows = math.prod(form.y_dims[:-1])
    kernel = MatrixCell(ctx, kernel_slice, instr.operands[1].shape, form.k_perm,
                        (taps, form.y_dims[-1]))
    out = MatrixCell(ctx, output_slice, instr.shape, form.out_perm, (rows, form.y_dims[-1]))
    flops = 2 * rows * taps * form.y_dims[-1]
    if _is_pointwise(form):
        cols = MatrixCell(ctx, input_slice, instr.operands[0].shape, form.in_perm, (rows, taps))
        return matmul_runner(cols, kernel, out, flops)
    from .conv_native import conv_runner

    direct = conv_runner(ctx, instr, form, x, kernel_slice, output_slice) \
        or _direct_convolution(ctx, instr, form, x, kernel_slice, output_slice) \
        or _direct_convolution_1d(ctx, instr, form, x, kernel_slice, output_slice)
    if direct is not None:
        return direct
    gather, patches = _patches(x, form)
    matrix = np.empty(patches.shape, patches.dtype)
    product = matmul_runner(_FixedMatrix(matrix.reshape(rows, taps)), kernel, out, flops)
    copy = im2col_copy(matrix, patches)

    def run() -> None:
        gather()
        copy()
        product()
    return run


def im2col_copy(matrix: np.ndarray, patches: np.ndarray):
    """A runner filling `matrix` from the `patches` view: a native copy job
    (runtime/cpu/hostops.py) where one applies, else np.copyto."""
    from .hostops import copy_job

    job = copy_job(matrix, patches)
    return job.run if job is not None else (lambda: np.copyto(matrix, patches))


def _nothing() -> None:
    return None


class _FixedMatrix:
    """A scratch matrix in the shape of a MatrixCell (never rebound)."""

    def __init__(self, matrix: np.ndarray):
        self.shape = matrix.shape
        self.fixed = True
        self.cell = self
        self.a = matrix

    def operand(self) -> np.ndarray:
        return self.a


def _is_pointwise(form: ConvForm) -> bool:
    return all(wd.size == 1 and wd.stride == 1 and wd.padding_low == 0 and wd.padding_high == 0
               for wd in form.window) and form.x_dims[1:-1] == form.y_dims[1:-1]


# ---- the padded input and its window patches --------------------------------------------------

def _placement(n: int, wd) -> tuple[int, slice, slice]:
    """(padded size, destination slice, source slice) of one spatial dimension: input element
    j lands at padding_low + j * base_dilation; those outside [0, size) are cropped."""
    step = wd.base_dilation
    size = (n - 1) * step + 1 + wd.padding_low + wd.padding_high
    lo = max(0, -(wd.padding_low // step))  # first j with padding_low + j * step >= 0
    hi = min(n, (size - 1 - wd.padding_low) // step + 1) if size > 0 else lo
    if hi <= lo:
        return max(size, 0), slice(0, 0), slice(0, 0)
    start = wd.padding_low + lo * step
    return size, slice(start, start + (hi - lo - 1) * step + 1, step), slice(lo, hi)


def padded_input(x, form: ConvForm):
    """(runner copying the input in, the zero-bordered (N, *spatial, C) buffer)."""
    copy, xp = padded_images(x, form)
    n = form.x_dims[0]
    return (lambda: copy(0, n)), xp


def padded_dims(form: ConvForm) -> list[int]:
    """(N, *spatial, C) of the zero-bordered input buffer."""
    return [form.x_dims[0], *(_placement(n, wd)[0] for n, wd in
                              zip(form.x_dims[1:-1], form.window, strict=True)), form.x_dims[-1]]


def padded_images(x, form: ConvForm, into: np.ndarray | None = None):
    """(copy(n0, n1) copying images [n0, n1) of the input in, the zero-bordered (N, *spatial,
    C) buffer): the copies of disjoint image ranges may run on different threads. `into`: a
    buffer of that shape other thunks also use (scratch): each copy zeroes its images'
    borders (or, with base dilation, the images) first; else a zeroed one of its own."""
    places = [_placement(n, wd) for n, wd in zip(form.x_dims[1:-1], form.window, strict=True)]
    xp = np.zeros(padded_dims(form), x.a.dtype) if into is None else into
    inner = tuple(p[1] for p in places)
    src = tuple(p[2] for p in places)
    clear = None if into is None else _border_clearer(xp, places, form.window)

    def copy(n0: int, n1: int) -> None:
        if clear is not None:
            clear(n0, n1)
        strided_copy(xp[(slice(n0, n1), *inner)], x.a[(slice(n0, n1), *src)])
    return copy, xp


def _border_clearer(xp: np.ndarray, places, window):
    """clear(n0, n1): zero what the input copy leaves unwritten in images [n0, n1) of `xp`:
    the bands before and after the copied range of each spatial axis, or everything where a
    base dilation leaves holes between the copied elements."""
    if any(wd.base_dilation != 1 for wd in window):
        return lambda n0, n1: xp[n0:n1].fill(0)
    bands = []
    for axis, (size, dst, _) in enumerate(places, start=1):
        for band in (slice(0, dst.start), slice(dst.stop, size)):
            if band.stop > band.start:
                bands.append((axis, band))

    def clear(n0: int, n1: int) -> None:
        for axis, band in bands:
            index = [slice(n0, n1)] + [slice(None)] * (xp.ndim - 1)
            index[axis] = band
            xp[tuple(index)] = 0
    return clear


def _patches(x, form: ConvForm):
    """(runner filling the padded input, the (N, *OUT, *WINDOW, C) view of its patches)."""
    gather, xp = padded_input(x, form)
    ns = len(form.window)
    spans = [(wd.size - 1) * wd.window_dilation + 1 for wd in form.window]
    view = np.lib.stride_tricks.sliding_window_view(xp, spans, axis=tuple(range(1, 1 + ns)))
    sel = (slice(None), *(slice(0, o * wd.stride, wd.stride)
                          for o, wd in zip(form.y_dims[1:-1], form.window, strict=True)),
           slice(None), *(slice(None, None, -wd.window_dilation) if wd.window_reversal
                          else slice(None, None, wd.window_dilation) for wd in form.window))
    # (N, *OUT, C, *WINDOW) -> (N, *OUT, *WINDOW, C): C stays the contiguous axis.
    patches = view[sel].transpose([0, *range(1, 1 + ns), *range(2 + ns, 2 + 2 * ns), 1 + ns])
    return gather, patches


def split_axis(a: np.ndarray, axis: int, parts: tuple[int, ...]) -> np.ndarray:
    """`a` with one axis split into `parts` (always a view: splitting never copies)."""
    out = a.view()
    out.shape = a.shape[:axis] + parts + a.shape[axis + 1:]
    return out


def _grouped_im2col(ctx: LoadContext, instr, form: ConvForm, x, kernel_slice, output_slice):
    """Feature / batch groups and reversed windows: one batched product over the groups."""
    bg, g, ns = form.batch_groups, form.groups, len(form.window)
    nb, o = form.y_dims[0], form.y_dims[-1]
    cg, og = form.x_dims[-1] // g, o // (g * bg)
    gather, patches = _patches(x, form)
    # (BG, Nb, *OUT, *WINDOW, G, Cg) -> (BG, G, Nb, *OUT, *WINDOW, Cg)
    p = split_axis(split_axis(patches, 2 * ns + 1, (g, cg)), 0, (bg, nb))
    p = p.transpose([0, 2 * ns + 2, *range(1, 2 * ns + 2), 2 * ns + 3])
    matrix = np.empty(p.shape, p.dtype)
    rows, depth = nb * math.prod(form.y_dims[1:-1]), form.taps * cg
    kernel = ctx.memory.cell(kernel_slice, instr.operands[1].shape,
                             lambda v: _group_major(v.transpose(form.k_perm), bg, g, og))
    weights = np.empty((bg, g, *kernel.a.shape[2:]), kernel.a.dtype)
    # Output (Nb, *OUT, O) -> (BG, G, Nb, *OUT, Og), O split batch-group major.
    out = ctx.memory.cell(output_slice, instr.shape,
                          lambda v: _group_major(v.transpose(form.out_perm), bg, g, og))
    product = np.empty((bg * g, rows, og), matrix.dtype)
    a, b = _FixedMatrix(matrix.reshape(bg * g, rows, depth)), \
        _FixedMatrix(weights.reshape(bg * g, depth, og))
    multiply = blas.product_runner(a, b, _FixedMatrix(product), bg * g, rows, og,
                                   2 * bg * g * rows * depth * og)
    result = product.reshape(out.a.shape)

    def run() -> None:
        gather()
        np.copyto(matrix, p)
        np.copyto(weights, kernel.a)
        multiply()
        np.copyto(out.a, result)
    return run


def _group_major(v: np.ndarray, bg: int, g: int, og: int):
    """An array whose last axis is O (batch-group major) with (BG, G) moved to the front and
    Og last: a kernel (*WINDOW, Cg, O) -> (BG, G, *WINDOW, Cg, Og), an output
    (Nb, *OUT, O) -> (BG, G, Nb, *OUT, Og)."""
    last = v.ndim - 1
    v = split_axis(v, last, (bg, g, og))
    return v.transpose([last, last + 1, *range(last), last + 2])


# ---- direct 2-D convolution through the native GEMM ------------------------------------------

def _direct_convolution_1d(ctx: LoadContext, instr, form: ConvForm, x, kernel_slice,
                           output_slice):
    """A 1-D f32 convolution without im2col, or None where this form does not apply.

    With the input zero-padded into (N, LP, C), tap j contributes
    out[n, ol, :] += sum over c of xp[n, ol*s + j*d, c] * w[j, c, :]: for each (image, tap)
    a GEMM of OL rows (row stride s*C) and depth C straight from the padded input, tap 0
    overwriting the output and the others adding to it. Without window dilation the taps'
    (j, c) runs are contiguous, so an image is one GEMM of depth KW*C. A dilated 2-tap
    layer of 4096 x 64 -> 128 (a WaveNet's): im2col wrote and read 2 MiB of patches.
    """
    from . import gemm, parallel

    window = form.window
    if gemm.native() is None or len(window) != 1 or x.a.dtype != np.float32:
        return None
    (wd,) = window
    kw, c, o = wd.size, form.x_dims[-1], form.y_dims[-1]
    dilation = wd.window_dilation
    taps = 1 if dilation == 1 else kw  # products per image
    depth = kw * c if dilation == 1 else c
    kernel = MatrixCell(ctx, kernel_slice, instr.operands[1].shape, form.k_perm,
                        (taps, depth, o))
    out = ctx.memory.cell(output_slice, instr.shape, lambda v: v.transpose(form.out_perm))
    if out.a.strides[2] != 4 or any(s % 4 for s in out.a.strides):
        return None
    weights = _weights(kernel)
    gather, xp = padded_input(x, form)
    image, base = xp.shape[1] * c, xp.ctypes.data
    ol = form.y_dims[1]
    k_strides = [s // 4 for s in weights.a.strides]
    o_strides = [s // 4 for s in out.a.strides]

    def rows(r0: int, r1: int) -> list[tuple[int, ...]]:
        """The products of output rows [r0, r1) (image-major: row r is (r // OL, r % OL)),
        one per (image, tap) they touch."""
        kp, op = gemm.address(weights.a), gemm.address(out.a)
        products: list[tuple[int, ...]] = []
        for n in range(r0 // ol, (r1 - 1) // ol + 1):
            lo, hi = max(r0 - n * ol, 0), min(r1 - n * ol, ol)
            products += [(1, hi - lo, o, depth,
                          base + 4 * (n * image + (lo * wd.stride + j * dilation) * c), 0,
                          wd.stride * c, kp + 4 * j * k_strides[0], 0, k_strides[1],
                          op + 4 * (n * o_strides[0] + lo * o_strides[1]), 0, o_strides[1],
                          ACCUMULATE if j else 0)
                         for j in range(taps)]
        return products

    total = form.x_dims[0] * ol
    flops = 2 * total * o * kw * c
    pool = parallel.pool()
    if flops < blas.NATIVE_SINGLE_THREAD_FLOPS or pool.threads == 1:
        pieces = [(0, total)]
    else:  # pieces of whole register tiles of rows
        tiles = parallel.split(-(-total // gemm.AVX512.mr), pool.threads * parallel.CHUNKS_PER_THREAD)
        pieces = [(a * gemm.AVX512.mr, min(b * gemm.AVX512.mr, total)) for a, b in tiles]
    return _products_runner(weights, out, gather, xp, lambda: [rows(*p) for p in pieces],
                            narrow=o <= gemm.AVX2.nr and ol < gemm.AVX512.mr)


def _direct_convolution(ctx: LoadContext, instr, form: ConvForm, x, kernel_slice, output_slice):
    """A 2-D f32 convolution without im2col, or None where this form does not apply.

    With the input zero-padded into (N, HP, WP, C), one kernel row i contributes
    out[n, oh, ow, :] += sum over (j, c) of xp[n, oh*sh + i*dh, ow*sw + j, c] * w[i, j, c, :],
    and for a fixed (n, oh) the (j, c) run is contiguous in xp (no window dilation along W).
    So every (image, kernel row) is one batched GEMM over oh with rows ow (row stride sw*C)
    and depth KW*C, straight from the padded input: the im2col matrix (KH*KW times the input)
    is never written, which made the im2col path memory-bound.
    """
    from . import gemm, parallel

    window = form.window
    if gemm.native() is None or len(window) != 2 or window[1].window_dilation != 1 \
            or x.a.dtype != np.float32:
        return None
    kh, kw = (wd.size for wd in window)
    c, o = form.x_dims[-1], form.y_dims[-1]
    kernel = MatrixCell(ctx, kernel_slice, instr.operands[1].shape, form.k_perm, (kh, kw * c, o))
    out = ctx.memory.cell(output_slice, instr.shape, lambda v: v.transpose(form.out_perm))
    if out.a.strides[3] != 4 or any(s % 4 for s in out.a.strides):
        return None
    weights = _weights(kernel)  # (KW, C) rows of O, or a scratch copy
    gather, xp = padded_input(x, form)
    row = xp.shape[2] * c  # elements per padded input row
    sa, lda = window[0].stride * row, window[1].stride * c
    oh, ow = form.y_dims[1], form.y_dims[2]
    k_strides = [s // 4 for s in weights.a.strides]
    o_strides = [s // 4 for s in out.a.strides]
    image, base = xp.shape[1] * row, xp.ctypes.data

    def images(n0: int, n1: int) -> list[tuple[int, ...]]:
        """The products of images [n0, n1): kernel row 0 overwrites the output, the others
        add to it (flags ACCUMULATE)."""
        kp, op = gemm.address(weights.a), gemm.address(out.a)
        return [(oh, ow, o, kw * c,
                 base + 4 * (n * image + i * window[0].window_dilation * row), sa, lda,
                 kp + 4 * i * k_strides[0], 0, k_strides[1],
                 op + 4 * n * o_strides[0], o_strides[1], o_strides[2],
                 ACCUMULATE if i else 0)
                for n in range(n0, n1) for i in range(kh)]

    flops = 2 * form.x_dims[0] * oh * ow * o * kh * kw * c
    pool = parallel.pool()
    if flops < blas.NATIVE_SINGLE_THREAD_FLOPS or pool.threads == 1:
        # Waking a worker costs more than a small convolution.
        pieces = [(0, form.x_dims[0])]
    else:
        pieces = parallel.split(form.x_dims[0], pool.threads * parallel.CHUNKS_PER_THREAD)
    return _products_runner(weights, out, gather, xp, lambda: [images(*p) for p in pieces],
                            narrow=o <= gemm.AVX2.nr and ow < gemm.AVX512.mr)


def _weights(kernel: MatrixCell):
    """The kernel matrix as the native GEMM reads it: in place where its columns are unit-stride
    (and every stride whole elements), else a scratch copy filled per run (a kernel whose
    features are swapped, as in a convolution's input gradient: a few KiB)."""
    a = kernel.cell.a
    if kernel.fixed and a.strides[-1] == 4 and not any(s % 4 for s in a.strides):
        return kernel.cell
    return _Scratch(kernel)


def _products_runner(weights, out, gather, xp, lists, narrow: bool):
    """A direct convolution's run: the padded input gathered, the kernel's scratch filled
    (if any), then the native products `lists()` describes."""
    from . import gemm

    products = gemm.list_runner((weights, out), lists, narrow=narrow)
    fill = weights.fill if isinstance(weights, _Scratch) else _nothing

    def run() -> None:
        gather()
        fill()
        products()
    run.keep_alive = xp
    return run
