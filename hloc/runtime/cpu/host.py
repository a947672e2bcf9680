"""Thunks run on the host with NumPy: copies, memsets, jax's LAPACK custom calls on LAPACK
(lapack.py), and the reference interpreter's implementation for everything else without
native code (sort, fft, other custom-calls and the Kernel thunks kernels.json lists as
fallbacks) — on views of the arena, so they read and write the same bytes native code does.
"""

from __future__ import annotations

import numpy as np

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


def build_host_step(ctx: LoadContext, thunk) -> Step:
    """Run the thunk's instruction with the reference interpreter on arena views, or on
    LAPACK (lapack.native_impl)."""
    instr = ctx.instruction(thunk.name)
    reads, writes = thunk.reads(), thunk.writes()
    pending = list(reads)
    operands = [_cells(ctx, op.shape, pending, _read_only) for op in instr.operands]
    outputs = _leaves(_cells(ctx, instr.shape, list(writes)), [])
    native = native_impl(instr)
    if native is not None:
        return _native_step(ctx, thunk, native, operands, outputs)
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


def _native_step(ctx: LoadContext, thunk, native, operands: list, outputs: list) -> Step:
    """A LAPACK call: its operands are arrays, and its results are fresh arrays in a flat
    tuple (never views of the operands), written straight into the output cells. A 12 x 12
    solve's step costs about 3 us beyond LAPACK, which loops of small solves repeat."""
    if any(isinstance(c, tuple) or c is None for c in operands):
        raise ValueError(f"{thunk.name}: a LAPACK call takes arrays")
    instr = ctx.instruction(thunk.name)

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


@builds(ThunkKind.SORT, ThunkKind.FFT, ThunkKind.CUSTOM_CALL)
def build_interpreted(ctx: LoadContext, thunk) -> Step:
    return build_host_step(ctx, thunk)
