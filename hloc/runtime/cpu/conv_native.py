"""2-D f32 convolutions through the native implicit-GEMM kernel (codegen/cpu/conv_gemm.py).

The runtime's other forms of a plain 2-D convolution (conv.py: one GEMM per image and kernel
row, or im2col) re-read the output once per kernel row and the filter with a stride of O
floats; this kernel reads the zero-padded input in place, the filter packed once per run, and
writes each output tile once (a ResNet 3x3 layer: 85 GFLOP/s on one Zen 3 core against 50).

A composite whose convolution step carries an epilogue (codegen/cpu/conv_epilogue.py: a
per-feature scale and bias, a residual, a ReLU) gets it applied by the kernel as each tile is
stored (conv.fused_convolution): the scratch buffer and the epilogue kernel's pass over it go.

It is used on every host with a native GEMM (AVX2 + FMA), with the AVX2 geometry compiled
for x86-64-v3, AVX-512 hosts included: on a Zen 4 core (AVX-512 run as two 256-bit halves)
it beat the AVX-512 GEMM's direct form (ResNet50 95 -> 63-66 ms, the ResNet block case 26.5
-> 18.6 ms, EfficientNet and MobileNet within noise). Intel's AVX-512 cores, with two
512-bit FMA units, are not measured. HLOC_CPU_CONV=gemm turns it off (to compare against
the GEMM forms).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os

import numpy as np

from ... import __version__
from ...codegen.cpu import conv_gemm
from ...codegen.cpu.conv_gemm import Epilogue
from ...codegen.cpu.gemm import AVX2, Geometry
from ...util.objcache import cache_key, cached_object
from ...util.record import dataclass
from . import blas, gemm, native_pool, parallel
from .contract import MatrixCell, _Scratch
from .gemm import address
from .memory import ALIGN, round_up

_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PACK = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_void_p)


class _Library:
    """The compiled convolution kernel for one geometry and target, loaded."""

    def __init__(self, geo: Geometry, target):
        import llvmlite.binding as llvm_binding

        from ...codegen import llvm

        text = conv_gemm.module_text(geo, target)
        key = cache_key(text, target.triple, target.cpu, target.features, "O3",
                        ".".join(map(str, llvm_binding.llvm_version_info)), __version__)
        obj = cached_object(key, lambda: llvm.compile_ir(text, target, 3).object_code, "conv")
        self.geo = geo
        self.library = llvm.JitLibrary(obj, target)
        self.conv = _CALL(self.library.address("hloc_sconv"))
        self.pack = _PACK(self.library.address("hloc_sconv_pack"))


@functools.cache
def library() -> _Library | None:
    """The kernel for this host, or None where the runtime keeps conv.py's GEMM forms."""
    from ...codegen.target import cpu_target
    from .gemm import host_geometry

    if os.environ.get("HLOC_CPU_CONV") == "gemm" or host_geometry() is None:
        return None
    # Compiled for x86-64-v3 on any host: the AVX2 geometry must not reach for EVEX registers.
    return _Library(AVX2, cpu_target("x86-64-v3"))


def conv_runner(ctx, instr, form, x, kernel_slice, output_slice, epilogue=()):
    """A runner for a plain 2-D f32 convolution (`form`, conv.ConvForm), or None where this
    kernel does not apply (no library, another dtype, window dilation along W, an output that
    is no [N*OH*OW, O] matrix with unit column stride, an epilogue it cannot apply).

    `epilogue`: (conv_gemm.Epilogue, operand) pairs applied to the result before it is stored
    into `output_slice`, operand a (slice, HLO shape) or None (see epilogue_operands).
    The padded input and the packed filter live in the executable's convolution workspace
    (LoadContext.conv_workspace), which every such convolution shares: both are filled at
    the start of each run and dead at its end. Before, each convolution held its own for the
    executable's life (ResNet50, 1x224x224: 77 MB of them; the shared workspace is 10 MB)."""
    from .conv import padded_dims, padded_images

    lib = library()
    window = form.window
    if lib is None or len(window) != 2 or window[1].window_dilation != 1 \
            or x.a.dtype != np.float32 or len(epilogue) > conv_gemm.EPILOGUE_OPS:
        return None
    (kh, kw), c, o = (wd.size for wd in window), form.x_dims[-1], form.y_dims[-1]
    rows = form.y_dims[0] * form.y_dims[1] * form.y_dims[2]
    out = MatrixCell(ctx, output_slice, instr.shape, form.out_perm, (rows, o))
    ops = epilogue_operands(ctx, form, rows, epilogue)
    if not (out.fixed and _unit_rows(out.cell.a)) or ops is None \
            or (epilogue and o % lib.geo.nr):  # the tile applies its epilogue to whole tiles
        return None
    kernel = MatrixCell(ctx, kernel_slice, instr.operands[1].shape, form.k_perm,
                        (kh * kw * c, o))
    weights = kernel.cell if kernel.fixed and _unit_rows(kernel.cell.a) else _Scratch(kernel)
    depth = kh * kw * c
    sizes = Workspace(tuple(padded_dims(form)), -(-o // lib.geo.nr) * lib.geo.nr * depth)
    ctx.reserve_conv_workspace(sizes.nbytes)

    def setup():
        into, packed = _buffers(sizes, ctx.conv_workspace())
        copy, xp = padded_images(x, form, into)
        gather = _gather(copy, form.x_dims[0], 2 * rows * depth * o)
        hp, wp = xp.shape[1], xp.shape[2]
        template = [0, 0, form.y_dims[1] * form.y_dims[2], form.y_dims[2], xp.ctypes.data,
                    hp * wp * c, window[0].stride * wp * c, window[1].stride * c, kh, kw * c,
                    window[0].window_dilation * wp * c, packed.ctypes.data, o, 0,
                    out.cell.a.strides[0] // 4, len(ops)]
        for code, _, ld in ops:
            template += [int(code), 0, ld]
        lists = [_words(template, lo, hi)
                 for lo, hi in _pieces(rows, lib.geo.mr, 2 * rows * depth * o)]
        pack = functools.partial(_pack, lib, weights, depth, o, packed)
        run = _runner(lib, lists, [out.cell] + [cell for _, cell, _ in ops], gather, pack)
        return run, (xp, packed)
    return _on_first_run(setup)


def _on_first_run(setup):
    """A runner that makes its real one (setup() -> (runner, what it points into)) when first
    called: by then every convolution of the executable has reserved its workspace, which the
    first of them allocates at the largest size."""
    made: list = []

    def run() -> None:
        if not made:
            made.extend(setup())
        made[0]()
    return run


@dataclass(frozen=True)
class Workspace:
    """What one convolution needs of the shared workspace: its zero-padded input, (N, HP, WP,
    C) floats, then its filter packed into panels, `packed_floats`, each 64-byte aligned."""

    padded: tuple[int, ...]
    packed_floats: int

    @property
    def padded_bytes(self) -> int:
        return round_up(4 * math.prod(self.padded))

    @property
    def nbytes(self) -> int:
        return self.padded_bytes + round_up(4 * self.packed_floats)


def epilogue_ops(ops: list, slice_of, shapes: list):
    """kernels.json's epilogue ops (["mul_column", ref], ...) as conv_runner's (Epilogue,
    (slice, HLO shape) or None) pairs, or None for an op this kernel does not know."""
    out: list[tuple[Epilogue, tuple | None]] = []
    for op in ops:
        code = Epilogue.__members__.get(str(op[0]).upper())
        if code is None:
            return None
        if code in (Epilogue.MAX_ZERO, Epilogue.ZERO_MAX):
            out.append((code, None))
        elif len(op) == 2 and op[1][0] == "operand":
            out.append((code, (slice_of(op[1]), shapes[op[1][1]])))
        else:
            return None
    return out


def epilogue_operands(ctx, form, rows: int, epilogue):
    """[(code, cell or None, row stride)] for the kernel's epilogue words, or None where an
    operand is not what its op reads: a contiguous f32[O] vector for the column ops, an
    [N*OH*OW, O] f32 matrix with unit column stride (the output's dimension order) for ADD."""
    o = form.y_dims[-1]
    ops: list[tuple[Epilogue, object, int]] = []
    for code, operand in epilogue:
        if code in (Epilogue.MAX_ZERO, Epilogue.ZERO_MAX):
            ops.append((code, None, 0))
            continue
        s, shape = operand
        if code == Epilogue.ADD:
            m = MatrixCell(ctx, s, shape, form.out_perm, (rows, o))
            if not (m.fixed and m.cell.a.dtype == np.float32 and _unit_rows(m.cell.a)):
                return None
            ops.append((code, m.cell, m.cell.a.strides[0] // 4))
            continue
        cell = ctx.memory.cell(s, shape, lambda v: v)
        if cell.a.dtype != np.float32 or cell.a.shape != (o,) or cell.a.strides != (4,):
            return None
        ops.append((code, cell, 0))
    return ops


def _pack(lib, weights, depth: int, o: int, packed: np.ndarray) -> None:
    """The filter (a fixed view or a scratch copy, refreshed) into its panels."""
    if isinstance(weights, _Scratch):
        weights.fill()
    w = weights.a
    lib.pack(depth, o, address(w), w.strides[0] // 4, packed.ctypes.data)


def _runner(lib, lists, cells, gather, pack):
    """Run the calls of `lists` (one per row piece) after filling the padded input and
    packing the filter; each run re-points the words at the cells' current arrays (the
    output, then each epilogue operand: a cell may be rebound between runs). Several pieces
    are one job of the native pool (gemm.call_splitter), else go through Python's threads."""
    call = lib.conv
    slots = [13] + [conv_gemm.CONV_WORDS + 2 + 3 * i for i in range(len(cells) - 1)]
    native = gemm.call_splitter() if len(lists) > 1 else None
    if len(lists) == 1:
        dispatch = functools.partial(call, lists[0][1])
    elif native is not None:
        job_fn, state = native
        words = (ctypes.c_int64 * (3 + len(lists)))(
            state, len(lists), ctypes.cast(call, ctypes.c_void_p).value or 0,
            *(ctypes.addressof(w) for w, _ in lists))
        dispatch = functools.partial(job_fn, ctypes.c_void_p(ctypes.addressof(words)))
        dispatch.keep_alive = words
    else:
        dispatch = functools.partial(parallel.pool().run, call,
                                     [(pointer,) for _, pointer in lists])

    def run() -> None:
        gather()
        pack()
        for slot, cell in zip(slots, cells, strict=True):
            if cell is not None:
                a = address(cell.a)
                for words, _ in lists:
                    words[slot] = a
        dispatch()
    return run


def _gather(copy, images: int, flops: int):
    """The padded input's copy (copy(n0, n1) of image ranges), split across the pool by images
    where the convolution is (a ResNet layer: 1 ms against 22 ms of kernel on one thread)."""
    pieces = _pieces(images, 1, flops)
    if len(pieces) == 1:
        return lambda: copy(0, images)
    pool = parallel.pool()
    return functools.partial(pool.run, copy, pieces)


def _unit_rows(a: np.ndarray) -> bool:
    """A 2-D f32 view with contiguous rows (unit column stride) and whole-element strides."""
    return (a.strides[1] == 4 or a.shape[1] == 1) and a.strides[0] % 4 == 0


def _buffers(ws: Workspace, workspace: np.ndarray | None):
    """(padded input buffer or None, packed filter buffer): carved from `workspace` where it
    is large enough and 64-byte aligned, else (None: padded_images makes one, a packed filter
    buffer of this runner's own)."""
    if workspace is None or workspace.size < ws.nbytes or workspace.ctypes.data % ALIGN:
        return None, _aligned(ws.packed_floats)
    floats = workspace[:ws.nbytes].view(np.float32)
    into = floats[:math.prod(ws.padded)].reshape(ws.padded)
    start = ws.padded_bytes // 4
    return into, floats[start:start + ws.packed_floats]


def _aligned(floats: int) -> np.ndarray:
    """A float32 array of `floats` elements starting on a 64-byte boundary."""
    raw = np.empty(floats + 16, np.float32)
    skip = (-raw.ctypes.data % 64) // 4
    return raw[skip:skip + floats]


def _pieces(rows: int, mr: int, flops: int) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) for the pool: one on the calling thread for a small convolution
    (waking a worker costs more), else a few per thread, cut at multiples of MR."""
    threads = native_pool.threads()
    if flops < blas.NATIVE_SINGLE_THREAD_FLOPS or threads == 1:
        return [(0, rows)]
    parts = threads * parallel.CHUNKS_PER_THREAD
    size = -(-rows // parts // mr) * mr
    return [(lo, min(rows, lo + size)) for lo in range(0, rows, size)]


def _words(template: list[int], lo: int, hi: int) -> tuple[ctypes.Array, ctypes.c_void_p]:
    """One hloc_sconv call's words (rows [lo, hi)) and their address."""
    words = (ctypes.c_int64 * conv_gemm.CALL_WORDS)(*template)
    words[0], words[1] = lo, hi
    return words, ctypes.c_void_p(ctypes.addressof(words))
