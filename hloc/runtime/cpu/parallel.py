"""A minimal work-sharing thread pool for splitting one kernel's units across cores.

ctypes releases the GIL while a kernel runs, so Python threads calling disjoint unit ranges
of the same kernel run truly in parallel. A split kernel is cut into several chunks per
thread; the calling thread and the woken workers *claim* chunks from a shared counter until
none is left, and the caller then waits only for chunks already being worked on. A worker
that the OS has not scheduled yet (another process holds the core) therefore never delays
the run: the caller simply does its share. Only kernels with enough work are split, as
waking a worker costs tens of microseconds.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading

# Kernels estimated below this many scalar operations run on the calling thread only.
MIN_PARALLEL_WORK = 1 << 18
CHUNKS_PER_THREAD = 4


class _Job:
    """One split kernel call: chunks to claim and a count of finished ones."""

    __slots__ = ("fn", "ranges", "claims", "finished", "lock", "done")

    def __init__(self, fn, ranges):
        self.fn, self.ranges = fn, ranges
        self.claims = itertools.count()  # next() is atomic under the GIL
        self.finished = 0
        self.lock = threading.Lock()
        self.done = threading.Event()

    def work(self) -> None:
        n = len(self.ranges)
        while (i := next(self.claims)) < n:
            self.fn(*self.ranges[i])
            with self.lock:
                self.finished += 1
                if self.finished == n:
                    self.done.set()


class Pool:
    """`workers` daemon threads helping the calling thread with split kernels."""

    def __init__(self, workers: int):
        self.workers = max(0, workers)
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        for k in range(self.workers):
            threading.Thread(target=self._loop, name=f"hloc-cpu-{k}", daemon=True).start()

    @property
    def threads(self) -> int:
        return self.workers + 1

    def _loop(self) -> None:
        while True:
            self._jobs.get().work()

    def run(self, fn, ranges: list[tuple]) -> None:
        """fn(*r) for every r in ranges, shared between this thread and the workers."""
        if not ranges:
            return
        job = _Job(fn, ranges)
        for _ in range(min(self.workers, len(ranges) - 1)):
            self._jobs.put(job)
        job.work()
        job.done.wait()


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> Pool:
    """The process-wide pool: os.cpu_count() threads in all (HLOC_CPU_THREADS overrides)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            threads = int(os.environ.get("HLOC_CPU_THREADS") or os.cpu_count() or 1)
            _POOL = Pool(threads - 1)
        return _POOL


def split(extent: int, parts: int) -> list[tuple[int, int]]:
    """[0, extent) in `parts` nearly equal, non-empty ranges."""
    parts = max(1, min(parts, extent))
    return [(extent * k // parts, extent * (k + 1) // parts) for k in range(parts)]
