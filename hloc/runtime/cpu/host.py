"""Thunks run on the host with NumPy: copies, memsets, jax's LAPACK custom calls on LAPACK
(lapack.py), and the reference interpreter's implementation for everything else without
native code (sort, fft, other custom-calls and the Kernel thunks kernels.json lists as
fallbacks) — on views of the arena, so they read and write the same bytes native code does.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import InputError
from ...thunks.base import ThunkKind
from ..interpreter import evaluate_computation, registry
from ..lapack import native_impl
from .program import LoadContext, Step, builds, op_names


def _read_only(view: np.ndarray) -> np.ndarray:
    view = view.view()
    view.flags.writeable = False  # implementations must not write their operands
    return view


def _cells(ctx: LoadContext, shape, slices: list, transform=None):
    """Cells for the array leaves of `shape` (slices consumed in order), in a nested
    structure of tuples like the value's (None for tokens)."""
    if shape.is_tuple:
        return tuple(_cells(ctx, s, slices, transform) for s in shape.tuple_shapes)
    if not shape.is_array:
        return None
    return ctx.memory.cell(slices.pop(0), shape, transform)


def _value(cells):
    if isinstance(cells, tuple):
        return tuple(_value(c) for c in cells)
    return None if cells is None else cells.a


def _leaves(value, out: list) -> list:
    if isinstance(value, tuple):
        for v in value:
            _leaves(v, out)
    elif value is not None:
        out.append(value)
    return out


def _call(fn) -> None:
    fn()


def build_host_step(ctx: LoadContext, thunk) -> Step:
    """Run the thunk's instruction with the reference interpreter on arena views, or on
    LAPACK (lapack.native_impl)."""
    instr = ctx.instruction(thunk.name)
    if (getattr(instr.attrs, "custom_call_target", None) or "").startswith("lapack_"):
        from .hostops import split_thunk_jobs, thunk_job
        from .parallel import pool

        threads = pool()
        jobs = split_thunk_jobs(ctx, thunk, threads.threads)
        if jobs is not None:  # ranges of the batch at once, on the CPU pool's threads
            ranges = [(job.run,) for job in jobs]
            return Step(thunk.name, f"host:{thunk.kind}", op_names(ctx, thunk.name),
                        lambda: threads.run(_call, ranges))
        job = thunk_job(ctx, thunk)
        if job is not None:  # the call and its copies in native code (hostops.py)
            return Step(thunk.name, f"host:{thunk.kind}", op_names(ctx, thunk.name), job.run)
    reads, writes = thunk.reads(), thunk.writes()
    pending = list(reads)
    operands = [_cells(ctx, op.shape, pending, _read_only) for op in instr.operands]
    outputs = _leaves(_cells(ctx, instr.shape, list(writes)), [])
    native = native_impl(instr)
    if native is not None:
        return _native_step(ctx, thunk, instr, native, operands, outputs)
    impl = registry.lookup(instr)
    rctx = registry.Context(evaluate_computation)

    def run() -> None:
        # Materialize every result before writing: results may be views of operands whose
        # bytes the outputs overlap (in-place sorts, aliased custom-calls).
        values = [_value(c) for c in operands]
        results = [np.array(v) for v in _leaves(impl(rctx, instr, values), [])]
        for cell, value in zip(outputs, results, strict=True):
            np.copyto(cell.a, value.astype(cell.a.dtype, copy=False))

    return Step(thunk.name, f"host:{thunk.kind}", op_names(ctx, thunk.name), run)


def _native_step(ctx: LoadContext, thunk, instr, native, operands: list, outputs: list) -> Step:
    """A LAPACK call: its operands are arrays, and its results are fresh arrays in a flat
    tuple (never views of the operands), written straight into the output cells. A 12 x 12
    solve's step costs about 3 us beyond LAPACK, which loops of small solves repeat."""
    if any(isinstance(c, tuple) or c is None for c in operands):
        raise InputError(f"custom-call %{thunk.name}: a LAPACK call takes arrays")

    def run() -> None:
        results = native(None, instr, [c.a for c in operands])
        for cell, value in zip(outputs, results if isinstance(results, tuple) else (results,),
                               strict=True):
            np.copyto(cell.a, value, casting="unsafe")

    return Step(thunk.name, f"host:{thunk.kind}", op_names(ctx, thunk.name), run)


@builds(ThunkKind.COPY)
def build_copy(ctx: LoadContext, thunk) -> Step:
    src, dst = thunk.source, thunk.destination
    if src == dst or src.size == 0:
        return Step(thunk.name, "copy", thunk.name, lambda: None)
    source, destination = ctx.memory.cell(src), ctx.memory.cell(dst)

    def run() -> None:
        np.copyto(destination.a, source.a)
    return Step(thunk.name, "copy", thunk.name, run)


@builds(ThunkKind.MEMSET)
def build_memset(ctx: LoadContext, thunk) -> Step:
    destination, byte = ctx.memory.cell(thunk.destination), thunk.byte

    def run() -> None:
        destination.a.fill(byte)
    return Step(thunk.name, "memset", thunk.name, run)


@builds(ThunkKind.SORT, ThunkKind.CUSTOM_CALL)
def build_interpreted(ctx: LoadContext, thunk) -> Step:
    return build_host_step(ctx, thunk)


# An FFT of at least this many output elements runs in pieces of at most FFT_PIECE_ELEMENTS
# (a batch element or more each) shared by the CPU pool's threads.
PARALLEL_FFT_ELEMENTS = 1 << 15
FFT_PIECE_ELEMENTS = 1 << 16


@builds(ThunkKind.FFT)
def build_fft(ctx: LoadContext, thunk) -> Step:
    """numpy's FFT on arena views, a big batch in pieces. numpy's n-D transform of a large
    batch is cache-hostile (a real 2-D FFT of 128 64x64 images: 9.5 ms as one call, 0.31 ms
    per 16 of them), and numpy releases the GIL while it transforms, so pieces of a few
    batch elements run on the pool's threads, each written straight into its slice of the
    output: that FFT now takes about 1.5 ms on 2 cores."""
    instr = ctx.instruction(thunk.name)
    ranks = len(instr.attrs.fft_length or ())
    batch_dims = instr.shape.dims[:instr.shape.rank - ranks] if instr.shape.is_array else ()
    batch = math.prod(batch_dims)
    if instr.shape.num_elements < PARALLEL_FFT_ELEMENTS or batch < 2:
        return build_host_step(ctx, thunk)
    (source,) = [ctx.memory.cell(s, instr.operands[0].shape, _read_only) for s in thunk.reads()]
    (output,) = [ctx.memory.cell(s, instr.shape) for s in thunk.writes()]
    impl = registry.lookup(instr)
    rctx = registry.Context(evaluate_computation)
    from .parallel import pool, split

    workers = pool()
    per_element = instr.shape.num_elements // batch
    pieces = split(batch, max(workers.threads, -(-batch * per_element // FFT_PIECE_ELEMENTS)))

    def flat(a: np.ndarray) -> np.ndarray:
        """`a` with its batch dimensions as one (a view: never a copy)."""
        view = a.view()
        view.shape = (batch,) + a.shape[len(batch_dims):]  # raises where a copy would be needed
        return view

    def run() -> None:
        src, out = source.a, output.a
        if np.may_share_memory(src, out):  # the operand is read whole before any write
            np.copyto(out, impl(rctx, instr, [src]), casting="unsafe")
            return
        try:
            src, out = flat(src), flat(out)
        except AttributeError:
            np.copyto(out, impl(rctx, instr, [src]), casting="unsafe")
            return

        def piece(lo: int, hi: int) -> None:
            np.copyto(out[lo:hi], impl(rctx, instr, [src[lo:hi]]), casting="unsafe")
        workers.run(piece, pieces)

    return Step(thunk.name, f"host:{thunk.kind}", op_names(ctx, thunk.name), run)
