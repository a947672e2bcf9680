"""Tuning numpy's BLAS (the Gemm / Convolution thunks' engine) for the CPU runtime.

numpy's wheels bundle OpenBLAS (scipy-openblas, DYNAMIC_ARCH); it is reached through ctypes,
and without it everything stays as numpy configured it.

- Threads: OpenBLAS splits even small products across all cores; its threads hand work over
  through spinning and barriers, which costs more than it gains below a few million flops
  and is very slow when another process holds a core. Small products run on the calling
  thread only (the thread-local setter, so other threads are unaffected).
- f32 products on AVX-512 hosts skip OpenBLAS for the native GEMM of gemm.py (faster there
  than OpenBLAS' AVX2 kernels, which OPENBLAS_CORETYPE may pin, and cheaper per call); on
  AVX2 hosts the small and mid-size ones do (gemm.AVX2_MAX_FLOPS).
- Kernels: OpenBLAS picks its AVX2 "Haswell" kernels on AMD Zen CPUs even when they have
  AVX-512, half the speed of its "SkylakeX" kernels there. `prefer_avx512_kernels()` switches
  the core type the way OPENBLAS_CORETYPE=SkylakeX would at startup (re-running OpenBLAS'
  own dynamic core selection), once, when the first CPU bundle is loaded. A core the user
  chose with OPENBLAS_CORETYPE is kept unless HLOC_OPENBLAS_CORETYPE names another one.
"""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from ..openblas import openblas
from . import gemm, native_pool, parallel

# Products below this many flops use one BLAS thread.
SINGLE_THREAD_FLOPS = 2000000
# LAPACK calls below this size (lapack_flops: about n^3 per matrix) use one BLAS thread.
# Factorizations split worse than products and OpenBLAS' threads meet at barriers many times
# per call: a 200 x 200 Cholesky took 0.17 ms on one thread, 0.34 on two, and, with another
# process on the cores, 10-400 ms; at 400 the two were even, at 800 two threads took 0.91 of
# one thread's time and at 1600 0.76 (2-core Zen 4, idle, numpy's OpenBLAS 0.3.31).
LAPACK_SINGLE_THREAD_FLOPS = 1 << 27
_AVX512 = frozenset({"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"})


@functools.cache
def _setter():
    """OpenBLAS' `openblas_set_num_threads_local(n) -> previous`, or None."""
    fn = getattr(openblas(), "openblas_set_num_threads_local", None)
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def core_name() -> str | None:
    fn = getattr(openblas(), "gotoblas_corename", None)
    if fn is None:
        return None
    fn.restype = ctypes.c_char_p
    return fn().decode()


@functools.cache
def prefer_avx512_kernels(host_features: frozenset[str]) -> str | None:
    """Switch OpenBLAS from its AVX2 kernels to its AVX-512 ones where the host has AVX-512
    but OpenBLAS runs Haswell/Zen kernels. HLOC_OPENBLAS_CORETYPE: unset = only when the user
    did not choose a core (OPENBLAS_CORETYPE unset), "keep" = never, a core name = always
    switch to that core. Returns the core name in use afterwards."""
    lib = openblas()
    current = core_name()
    choice = os.environ.get("HLOC_OPENBLAS_CORETYPE", "")
    if choice == "keep" or not hasattr(lib, "gotoblas_dynamic_init"):
        return current
    if not choice:
        if "OPENBLAS_CORETYPE" in os.environ or current not in ("Haswell", "Zen") \
                or not _AVX512 <= host_features:
            return current
        choice = "SkylakeX"
    if choice.lower() == (current or "").lower():
        return current
    saved = os.environ.get("OPENBLAS_CORETYPE")
    os.environ["OPENBLAS_CORETYPE"] = choice
    try:
        lib.gotoblas_dynamic_quit()
        lib.gotoblas_dynamic_init()
    finally:
        if saved is None:
            del os.environ["OPENBLAS_CORETYPE"]
        else:
            os.environ["OPENBLAS_CORETYPE"] = saved
    return core_name()


def single_threaded(run, flops: int, limit: int = SINGLE_THREAD_FLOPS):
    """`run(*args)` (a product or a LAPACK call) wrapped to use one BLAS thread when it is
    small (fewer than `limit` flops)."""
    setter = _setter()
    if setter is None or flops >= limit:
        return run

    def small(*args):
        previous = setter(1)
        try:
            return run(*args)
        finally:
            setter(previous)
    return small


# ---- products ---------------------------------------------------------------------------------

# A piece cut by rows (columns) of the result keeps at least this many: every piece packs the
# whole other operand again, so a deep product with a small result (a weight gradient:
# 27 x 32768 x 16) ran 2x slower as 8 pieces than on one thread.
MIN_PIECE = 32


def _chunks(batch: int | None, m: int, n: int, parts: int) -> list[tuple]:
    """Index tuples (a, b, out) cutting one product into independent pieces: by batch when
    there are enough batches, else by rows of the result, else by its columns."""
    lead = (slice(None),) if batch is not None else ()
    if batch is not None and batch >= parts:
        return [((slice(lo, hi),),) * 3 for lo, hi in parallel.split(batch, parts)]
    if m >= n:
        return [(lead + (slice(lo, hi),), lead, lead + (slice(lo, hi),))
                for lo, hi in parallel.split(m, min(parts, max(1, m // MIN_PIECE)))]
    return [(lead, lead + (slice(None), slice(lo, hi)), lead + (slice(None), slice(lo, hi)))
            for lo, hi in parallel.split(n, min(parts, max(1, n // MIN_PIECE)))]


class _Widened:
    """An operand cell's values in a wider type (bf16 operands of an f32 product, int8 ones of
    an int32 product, where the native GEMM is missing), refreshed by `fill` before each
    product."""

    def __init__(self, cell, dtype: np.dtype):
        self.cell, self.a = cell, np.empty(cell.a.shape, dtype)

    def fill(self) -> None:
        np.copyto(self.a, self.cell.a)


def _int8_runner(ca, cb, co, batch: int | None, m: int, n: int, flops: int):
    """co.a = ca.a @ cb.a for int8 operands and an int32 result through f64 BLAS: every
    product and partial sum of int8 values is exact in f64 below 2^53 (K under 5.5e11), and
    the int64 of the sum taken to int32 wraps as XLA's int32 accumulation does."""
    wa, wb = _Widened(ca, np.dtype(np.float64)), _Widened(cb, np.dtype(np.float64))
    wo = _Widened(co, np.dtype(np.float64))
    inner = product_runner(wa, wb, wo, batch, m, n, flops)

    def widened() -> None:
        wa.fill()
        wb.fill()
        inner()
        np.copyto(co.a, wo.a.astype(np.int64), casting="unsafe")
    return widened


def product_runner(ca, cb, co, batch: int | None, m: int, n: int, flops: int):
    """A runner for co.a = ca.a @ cb.a (cells holding matrix views of fixed shape).

    Small products run on the calling thread with one BLAS thread; big ones are cut into
    pieces that this process's work-sharing pool runs with one BLAS thread each, which keeps
    its speed when another process takes a core (OpenBLAS' own threads then stall at their
    barriers)."""
    native = gemm.product_describer(ca, cb, co)
    if native is not None:
        return _native_runner(native, (ca, cb, co), batch or 1, m, n, flops)
    if co.a.dtype == np.int32:  # int8 operands without the native GEMM: f64 products
        return _int8_runner(ca, cb, co, batch, m, n, flops)
    if ca.a.dtype != co.a.dtype:  # bf16 operands without the native GEMM: widened copies
        wa, wb = _Widened(ca, co.a.dtype), _Widened(cb, co.a.dtype)
        inner = product_runner(wa, wb, co, batch, m, n, flops)

        def widened() -> None:
            wa.fill()
            wb.fill()
            inner()
        return widened
    matmul, setter, pool = np.matmul, _setter(), parallel.pool()
    if setter is None:
        return lambda: matmul(ca.a, cb.a, out=co.a)
    if flops < SINGLE_THREAD_FLOPS or pool.threads == 1:
        # A pool of one thread (HLOC_CPU_THREADS=1, e.g. one per MPI rank) means one BLAS
        # thread too: OpenBLAS' own threads spun on the cores the other ranks use (an MLP
        # step of 0.25 GFLOP took 140 ms instead of 15 ms on a busy 2-core machine).
        def single() -> None:
            previous = setter(1)
            matmul(ca.a, cb.a, out=co.a)
            setter(previous)
        return single
    pieces = _chunks(batch, m, n, pool.threads * parallel.CHUNKS_PER_THREAD)

    def piece(sa, sb, so) -> None:
        previous = setter(1)
        matmul(ca.a[sa], cb.a[sb], out=co.a[so])
        setter(previous)

    return functools.partial(pool.run, piece, pieces)


# Products below this many flops run the native GEMM on the calling thread (HLOC_CPU_SPLIT_FLOPS
# overrides); bigger ones are cut for the native pool (native_pool.py), whose spinning worker
# takes a piece within a microsecond. This was 8 MFLOP while the pool's back-off sent most
# jobs to one thread anyway (codegen/cpu/pool.py); with the back-off judged against the
# caller's own work, cutting from 2 MFLOP up made a scan RNN's loop of 32 x 256 x 256 products
# 0.72-0.80x the time and the LSTM 0.68-0.72x (2 Zen 3 cores, alternating rounds), and 0.87x
# both with three busy processes on those two cores, where a preempted worker makes the caller
# run the next jobs alone.
NATIVE_SINGLE_THREAD_FLOPS = int(os.environ.get("HLOC_CPU_SPLIT_FLOPS") or 2000000)


def native_ranges(batch: int, m: int, n: int, flops: int) -> list[tuple[int, ...]]:
    """(b0, b1, r0, r1, c0, c1) pieces of a native product for the native pool: one per
    thread (smaller pieces re-pack A (column pieces) or B (row pieces) more often, which
    costs more than the finer load balance gains, measured on 2 cores), or the whole
    product where it is small. Each element is computed alike whatever the pieces."""
    threads = native_pool.threads()
    if flops < NATIVE_SINGLE_THREAD_FLOPS or threads == 1:
        return [(0, batch, 0, m, 0, n)]
    return gemm.pieces(batch, m, n, threads)


def _native_runner(product, cells, batch: int, m: int, n: int, flops: int):
    """The native f32 GEMM (gemm.py), its pieces shared with the native pool when big."""
    ranges = native_ranges(batch, m, n, flops)
    # The narrow library has no vdpbf16ps kernel: bf16 products stay where the host's has one;
    # int8 ones stay on the host's geometry (not measured on the narrow one).
    operand = cells[0].a.dtype
    pairs = operand == np.int8 or (operand != cells[2].a.dtype and gemm.host_dpbf16())
    narrow = not pairs and all(gemm.narrow_pays(r1 - r0, c1 - c0)
                               for _, _, r0, r1, c0, c1 in ranges)
    return gemm.list_runner(cells, lambda: [[product(*r)] for r in ranges], narrow=narrow)
