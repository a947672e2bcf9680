"""Kernel thunks, composites and native drivers (kernels.json's three kinds of native code).

- A kernel: one call `fn(pointers, begin, end)` through a functools.partial (no Python frame
  of ours), or its units split across the thread pool when it has enough work. The pointer
  array (operand leaves then output leaves, the ABI in hloc/codegen/cpu/kernel_spec.py) is built
  once at load time; Memory re-points its slots when a large parameter or output is bound
  elsewhere for a run.
- A composite (a fusion around a dot/convolution, hloc/codegen/cpu/outline.py): its prologue
  and epilogue kernels and its BLAS product, through the runtime's scratch allocation.
- A driver (hloc/codegen/cpu/driver.py): one call running a run of small thunks natively,
  given a table of their pointer arrays and slice addresses.
Kernel thunks kernels.json lists as host fallbacks run the reference interpreter instead.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

from ...buffers.assignment import Slice
from ...codegen.cpu.pool import KERNEL_JOB_WORDS
from ...thunks import Convolution, Gemm
from ...thunks.base import ThunkKind, walk
from . import gemm, native_pool, parallel
from .contract import build_gemm, native_product_list
from .conv import build_convolution, fused_convolution
from .host import build_host_step
from .memory import SCRATCH
from .program import LoadContext, Step, builds, op_names

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
DRIVER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class LoadedKernels:
    """Function objects of the loaded object, by symbol (created once each)."""

    def __init__(self, library):
        self.library = library
        self._fns: dict[str, object] = {}

    def function(self, symbol: str, prototype=KERNEL_TYPE):
        fn = self._fns.get(symbol)
        if fn is None:
            fn = self._fns[symbol] = prototype(self.library.address(symbol))
        return fn


@builds(ThunkKind.KERNEL)
def build_kernel_step(ctx: LoadContext, thunk) -> Step:
    ops = op_names(ctx, thunk.name)
    composite = ctx.kernels.get("composites", {}).get(thunk.name)
    if composite is not None:
        return Step(thunk.name, "composite", ops, _composite_runner(ctx, thunk, composite))
    meta = ctx.kernels.get("kernels", {}).get(thunk.name)
    if meta is None:  # a documented host fallback (kernels.json "fallbacks")
        return build_host_step(ctx, thunk)
    operands, outputs = thunk.reads(), thunk.writes()
    return Step(thunk.name, "kernel", ops, kernel_runner(ctx, meta, [*operands, *outputs]))


def pointer_array(ctx: LoadContext, slices):
    """The kernel ABI's buffer pointer array for `slices` (kept alive, re-pointed on rebind)."""
    pointers = (ctypes.c_void_p * max(1, len(slices)))()
    for index, s in enumerate(slices):
        ctx.memory.pointer(s, pointers, index)
    ctx.keep_alive.append(pointers)
    return pointers


def kernel_runner(ctx: LoadContext, meta: dict, slices) -> Callable[[], None]:
    """A call of kernel `meta["symbol"]` on `slices`, split across threads if it is big: as
    one job of the native pool (its workers spin in native code between jobs, so a job reaches
    them in microseconds), else through the Python thread pool (parallel.py, tens of
    microseconds a call: a 1 MB transpose took longer on two threads than on one)."""
    pointers = pointer_array(ctx, slices)
    arg = ctypes.c_void_p(ctypes.addressof(pointers))
    fn = ctx.loaded.function(meta["symbol"])
    extent = int(meta["parallel_extent"])
    if extent == 0:
        return _nothing
    if extent > 1 and int(meta.get("work", 0)) >= parallel.MIN_PARALLEL_WORK:
        native = gemm.kernel_splitter()
        if native is not None:
            job = kernel_job(ctx, meta, pointers, native[1])
            return functools.partial(native[0], ctypes.c_void_p(ctypes.addressof(job)))
        pool = parallel.pool()
        if pool.threads > 1:
            parts = pool.threads * parallel.CHUNKS_PER_THREAD
            ranges = [(arg, lo, hi) for lo, hi in parallel.split(extent, parts)]
            return functools.partial(pool.run, fn, ranges)
    return functools.partial(fn, arg, 0, extent)


def kernel_job(ctx: LoadContext, meta: dict, pointers, state: int):
    """The words of a kernel's job for hloc_kernel_job (codegen/cpu/pool.py KERNEL_JOB_WORDS):
    the native pool's `state` (0: none, a driver then calls the kernel itself), the pieces,
    the kernel, its pointer array and its units. Kept alive with the executable."""
    extent = int(meta["parallel_extent"])
    parts = min(extent, native_pool.threads() * parallel.CHUNKS_PER_THREAD)
    job = (ctypes.c_int64 * KERNEL_JOB_WORDS)(
        state, parts, ctx.loaded.library.address(meta["symbol"]), ctypes.addressof(pointers),
        extent)
    ctx.keep_alive.append(job)
    return job


def _driver_kernel_job(ctx: LoadContext, thunk) -> int | None:
    """A driver's job for a big kernel: on the native pool, or on the calling thread alone
    where this process has one thread; None where only Python's threads could split it (no
    native GEMM: the thunks then run one by one, the kernel split as kernel_runner does)."""
    native = gemm.kernel_splitter()
    if native is None and parallel.pool().threads > 1:
        return None
    pointers = pointer_array(ctx, list(thunk.reads()) + list(thunk.writes()))
    job = kernel_job(ctx, ctx.kernels["kernels"][thunk.name], pointers,
                     native[1] if native is not None else 0)
    return ctypes.addressof(job)


def _nothing() -> None:
    return None


# ---- drivers: runs of thunks executed natively (hloc/codegen/cpu/driver.py) -------------------

def build_driver_step(ctx: LoadContext, driver: dict, thunks) -> Step | None:
    """The step running a driver, or None where one of its products cannot run natively
    (the caller then runs its thunks one by one)."""
    by_name = {visit.thunk.name: visit.thunk for visit in walk(thunks)}
    slots = driver["slots"]
    table = (ctypes.c_void_p * max(1, len(slots)))()
    for index, (kind, value) in enumerate(slots):
        if kind == "buffers":
            t = by_name[value]
            operands, outputs = t.reads(), t.writes()
            pointers = pointer_array(ctx, list(operands) + list(outputs))
            table[index] = ctypes.addressof(pointers)
        elif kind in ("gemm", "step", "host", "kernel_job"):
            address = _native_address(ctx, by_name, kind, value)
            if address is None:
                return None
            table[index] = address
        else:
            ctx.memory.pointer(Slice(*value), table, index)
    ctx.keep_alive.append(table)
    fn = ctx.loaded.function(driver["symbol"], DRIVER_TYPE)
    names = [t.name for t in thunks]
    return Step(f"{names[0]}..{names[-1]}" if len(names) > 1 else names[0], "driver",
                f"native: {', '.join(names)}", functools.partial(fn, ctypes.c_void_p(
                    ctypes.addressof(table))))


def _native_address(ctx: LoadContext, by_name: dict, kind: str, value) -> int | None:
    """A driver slot's job (a Gemm thunk's, a big kernel's, a LAPACK call's, or a composite's
    product step) or pointer array (a composite's kernel step); None where one cannot run
    natively."""
    if kind == "gemm":
        return native_product_list(ctx, by_name[value])
    if kind == "kernel_job":
        return _driver_kernel_job(ctx, by_name[value])
    if kind == "host":
        from .hostops import thunk_job

        job = thunk_job(ctx, by_name[value])
        if job is None:
            return None
        ctx.keep_alive.append(job)
        return job.address
    name, index = value
    thunk = by_name[name]
    step = ctx.kernels["composites"][name]["steps"][index]
    slice_of = _composite_slices(thunk, ctx.kernels["composites"][name])
    if step["kind"] == "gemm":
        return native_product_list(ctx, _gemm_thunk(ctx, step, slice_of))
    return ctypes.addressof(pointer_array(ctx, [slice_of(ref) for ref in step["buffers"]]))


# ---- composites: kernels around a gemm / convolution (hloc/codegen/cpu/outline.py) -------------

def planned_scratch(thunk, composite: dict) -> Slice | None:
    """The composite's scratch block where buffer assignment placed it (the Kernel thunk's
    `scratch` slice), or None: bundles of earlier hlocs, whose composites use the runtime's
    own scratch allocation (SCRATCH, sized by Executable)."""
    blocks: tuple[Slice, ...] = getattr(thunk, "scratch", ())
    return blocks[0] if len(blocks) == 1 and blocks[0].size >= composite["scratch_bytes"] \
        else None


def _composite_slices(thunk, composite: dict) -> Callable[[list], Slice]:
    """slice_of(ref): the slice a composite's buffer reference names (kernels.json)."""
    block = planned_scratch(thunk, composite)
    allocation, base = (SCRATCH, 0) if block is None else (block.allocation, block.offset)
    scratch = [Slice(allocation, base + offset, size) for offset, size in composite["scratch"]]

    def slice_of(ref) -> Slice:
        kind, index = ref
        if kind == "operand":
            return thunk.operands[index]
        return thunk.outputs[index] if kind == "output" else scratch[index]
    return slice_of



def _composite_runner(ctx: LoadContext, thunk, composite: dict) -> Callable[[], None]:
    slice_of = _composite_slices(thunk, composite)
    steps = list(composite["steps"])
    fused = fused_convolution(ctx, thunk, steps[0], slice_of) if steps else None
    if fused is not None:  # the convolution applies the epilogue kernel's ops itself
        steps = [s for i, s in enumerate(steps) if i != steps[0]["epilogue"]["replaces"]]
    runs = [_COMPOSITE_PARTS[step["kind"]](ctx, step, slice_of) for step in steps]
    if fused is not None:
        runs[0] = fused
    if len(runs) == 1:
        return runs[0]

    def run() -> None:
        for part in runs:
            part()
    return run


def _kernel_part(ctx: LoadContext, step: dict, slice_of):
    return kernel_runner(ctx, step, [slice_of(ref) for ref in step["buffers"]])


def _gemm_thunk(ctx: LoadContext, step: dict, slice_of) -> Gemm:
    """A composite's product step as a Gemm thunk over its slices."""
    d = ctx.instruction(step["instruction"]).attrs.dot_dnums
    return Gemm(step["instruction"], slice_of(step["lhs"]), slice_of(step["rhs"]),
                slice_of(step["output"]), tuple(d.lhs_contracting_dimensions),
                tuple(d.rhs_contracting_dimensions), tuple(d.lhs_batch_dimensions),
                tuple(d.rhs_batch_dimensions))


def _gemm_part(ctx: LoadContext, step: dict, slice_of):
    return build_gemm(ctx, _gemm_thunk(ctx, step, slice_of)).run


def _convolution_part(ctx: LoadContext, step: dict, slice_of):
    thunk = Convolution(step["instruction"], slice_of(step["input"]), slice_of(step["kernel"]),
                        slice_of(step["output"]))
    return build_convolution(ctx, thunk).run


_COMPOSITE_PARTS = {"kernel": _kernel_part, "gemm": _gemm_part, "convolution": _convolution_part}
