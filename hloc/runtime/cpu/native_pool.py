"""The native GEMM's thread pool: worker threads sitting in generated code (codegen/cpu/pool.py).

Python starts the workers, once per process: each calls `hloc_pool_worker(state, work)`
through ctypes (which releases the GIL) and stays in it, spinning for about SPIN_CYCLES
time-stamp-counter cycles after each job and then sleeping in a futex, with its own packing
buffer. Jobs are published by generated code (`hloc_sgemm_job`, from a ctypes call or a
native driver), so handing a product's pieces to a spinning worker costs a few cache misses
instead of a Python wake-up (10-20 us). HLOC_CPU_THREADS (default: os.cpu_count()) counts
the calling thread too; with one thread there is no pool and jobs run on the caller.
"""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np

from ...codegen.cpu import pool as layout
from .memory import aligned_bytes, empty_aligned

# About 100 us at 3 GHz: longer than the gap between the products of a loop's iterations, so
# a worker stays awake through a loop, short enough not to hold a core long after one.
SPIN_CYCLES = 300_000
_WORKER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_libc = ctypes.CDLL(None, use_errno=True)


def syscall_address() -> int:
    """The address of the C library's syscall() (the pool's futex and sched_yield)."""
    return ctypes.cast(_libc.syscall, ctypes.c_void_p).value or 0


def threads() -> int:
    """Threads a job may use, the caller included (HLOC_CPU_THREADS or os.cpu_count())."""
    return max(1, int(os.environ.get("HLOC_CPU_THREADS") or os.cpu_count() or 1))


class NativePool:
    """`workers` threads in hloc_pool_worker of a loaded GEMM library, and their state."""

    def __init__(self, library, work_floats: int, workers: int):
        self.workers = max(0, workers)
        self._library = library  # the workers run its code: keep it mapped
        self._state = aligned_bytes(layout.STATE_BYTES)
        self._words = self._state.view(np.int64)
        self._words[layout.SPIN_CYCLES // 8] = SPIN_CYCLES
        self._buffers = [empty_aligned(4 * work_floats + 64) for _ in range(self.workers)]
        self._entry = _WORKER_TYPE(library.address("hloc_pool_worker"))
        self._threads = []
        for k, buf in enumerate(self._buffers):
            t = threading.Thread(target=self._entry, args=(self.address, buf.ctypes.data),
                                 name=f"hloc-gemm-{k}", daemon=True)
            t.start()
            self._threads.append(t)

    @property
    def address(self) -> int:
        """The state's address for jobs (0: no workers, jobs run on the calling thread)."""
        return self._state.ctypes.data if self.workers else 0

    def close(self) -> None:
        """Stop the workers (tests; the process-wide pool lives as long as the process).
        Only while no job runs: the generation is bumped without the callers' lock."""
        ints = self._state.view(np.int32)
        ints[layout.STOP // 4] = 1
        ints[layout.GENERATION // 4] += 1
        _libc.syscall(ctypes.c_long(202), ctypes.c_void_p(self._state.ctypes.data),
                      ctypes.c_long(129), ctypes.c_long(0x7FFFFFFF))
        for t in self._threads:
            t.join()
        self._threads.clear()


_POOL: NativePool | None = None
_LOCK = threading.Lock()


def shared(library, work_floats: int) -> NativePool:
    """The process-wide pool of the native GEMM (started on first use, with the workers of
    `library`, a JitLibrary of codegen/cpu/gemm.py's module)."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = NativePool(library, work_floats, threads() - 1)
        return _POOL
