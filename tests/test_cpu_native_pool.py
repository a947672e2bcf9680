"""The native GEMM's thread pool (codegen/cpu/pool.py, runtime/cpu/native_pool.py) and
composites inside native drivers: every piece runs once, results do not depend on the
thread count, and a scan-like loop of a product and a fused dot runs as one native call."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from hloc.codegen.cpu import pool as layout
from hloc.codegen.target import host_target
from hloc.runtime.cpu import blas, gemm, native_pool

from .support.bundles import compile_bundle, kernels_json, load_cpu
from .support.run import interpret
from .support.values import assert_close

pytestmark = [pytest.mark.cpu, pytest.mark.skipif(
    not (host_target().has("avx2") and host_target().has("fma")),
    reason="the native GEMM needs an AVX2 + FMA host")]


def _job(lib, pool_address: int, m: int, n: int, k: int, parts: int, seed: int):
    """(run, c, want): a product cut into pieces as one job, its output and numpy's."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    lists = []
    for _, _, r0, r1, c0, c1 in gemm.pieces(1, m, n, parts):
        product = (1, r1 - r0, c1 - c0, k, a.ctypes.data + 4 * r0 * k, 0, k,
                   b.ctypes.data + 4 * c0, 0, n, c.ctypes.data + 4 * (r0 * n + c0), 0, n, 0)
        lists.append(gemm.product_list([product], lib.work()))
    job = gemm.product_job(lists, pool_address)

    def run() -> None:
        lists[0][0][1] = lib.work()  # the calling thread's packing buffer, as list_runner
        lib.job_fn(job[1])
    run.keep = (a, b)  # type: ignore[attr-defined]
    return run, c, a.astype(np.float64) @ b


@pytest.fixture
def pool():
    """A pool of three workers of its own (the process-wide one is left alone)."""
    lib = gemm._library()
    own = native_pool.NativePool(lib.library, gemm.AVX512.work_floats, 3)
    yield lib, own
    own.close()


@pytest.mark.parametrize("m,n,k,parts", [(64, 300, 200, 4), (200, 96, 70, 7), (7, 33, 5, 3)])
def test_pool_runs_every_piece_once(pool, m, n, k, parts):
    """A piece run twice or not at all leaves NaN or a wrong sum; the result must equal the
    one-thread run bit for bit (each element is computed alike whatever thread runs it)."""
    lib, own = pool
    run, c, want = _job(lib, own.address, m, n, k, parts, m)
    alone, c1, _ = _job(lib, 0, m, n, k, parts, m)
    alone()
    for _ in range(50):
        c[...] = np.nan
        run()
        np.testing.assert_array_equal(c, c1)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_concurrent_callers_share_one_pool(pool):
    """Two threads submitting jobs at once (a multi-device run): one owns the pool, the
    other finds it busy and runs its pieces itself; both results are right."""
    lib, own = pool
    jobs = [_job(lib, own.address, 96, 256, 128, 4, seed) for seed in (1, 2)]
    errors: list = []

    def submit(run, c, want) -> None:
        try:
            for _ in range(100):
                c[...] = np.nan
                run()
                np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3)
        except AssertionError as e:
            errors.append(e)
    threads = [threading.Thread(target=submit, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_worker_that_starts_after_the_pool_stopped_returns():
    """A worker thread the scheduler runs only after close() (a loaded machine) must not wait
    for a generation that will never come: the close would wait for it for ever."""
    lib = gemm._library()
    own = native_pool.NativePool(lib.library, gemm.AVX512.work_floats, 1)
    own.close()
    late = threading.Thread(target=own._entry, args=(own._state.ctypes.data,
                                                      own._buffers[0].ctypes.data), daemon=True)
    late.start()
    late.join(timeout=10)
    assert not late.is_alive()


_PIECE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p)
_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                        ctypes.c_void_p)


def _timed_job(pool, pieces: int, caller_s: float, worker_s: float):
    """run() -> the threads that ran each of `pieces` pieces of one job on `pool`'s state
    (hloc_pool_run, called from this thread): a piece sleeps `caller_s` on this thread and
    `worker_s` on a worker (time.sleep lets the other threads take the GIL)."""
    lib, own = pool
    run_fn = _RUN(lib.library.address("hloc_pool_run"))
    me, ran = threading.get_ident(), [None] * pieces

    def piece(_arg, index, _work) -> None:
        ran[index] = threading.get_ident()
        time.sleep(caller_s if ran[index] == me else worker_s)
    callback = _PIECE(piece)

    def run() -> list:
        ran[:] = [None] * pieces
        run_fn(own.address, ctypes.cast(callback, ctypes.c_void_p), None, pieces, lib.work())
        return list(ran)
    run.keep = callback  # type: ignore[attr-defined]
    return run, me


def _alone_until(own) -> int:
    return int(own._state.view(np.int64)[layout.ALONE_UNTIL // 8])


def test_a_worker_finishing_its_share_later_keeps_the_pool(pool):
    """A worker that ends its half of a job 2 ms after the caller ends its own (a big product
    cut in two on a busy core) is no preempted worker: the jobs after it are still shared.
    (Judged by a count of spins, such a wait sent the next 64 jobs to the caller alone.)"""
    _, own = pool
    run, me = _timed_job(pool, 2, 0.05, 0.052)
    shared = 0
    for _ in range(5):
        ran = run()
        shared += len(set(ran)) == 2
        assert _alone_until(own) == 0, ran
    assert shared >= 3, f"only {shared} of 5 jobs ran on two threads"


def test_a_worker_late_by_more_than_the_callers_work_sends_jobs_to_the_caller(pool):
    """A worker that takes far longer than the caller's whole share (preempted by another
    process) makes the caller run the jobs of the next few milliseconds alone, without
    waiting for the pool; the one after them is shared again."""
    _, own = pool
    run, me = _timed_job(pool, 6, 0.005, 0.08)  # the three workers take one piece each
    for _ in range(5):  # until a worker claims a piece (it may still be waking up)
        if any(t != me for t in run()):
            break
    else:
        pytest.skip("no worker claimed a piece in five jobs (a very busy machine)")
    assert _alone_until(own) != 0  # a deadline _BACKOFF_CYCLES ahead (about 3 ms)
    # Whether a job falls within it depends on the clock, so the test sets it: far ahead,
    # then passed.
    deadline = own._state.view(np.int64)[layout.ALONE_UNTIL // 8:][:1]
    fast, _ = _timed_job(pool, 6, 0.0, 0.0)
    deadline[0] = 1 << 62
    assert fast() == [me] * 6
    assert _alone_until(own) == 1 << 62  # running alone does not move it
    deadline[0] = 0
    for _ in range(20):
        if any(t != me for t in run()):
            break
    else:
        pytest.fail("no job was shared again once the deadline had passed")


def test_big_products_are_cut_for_the_pool(monkeypatch):
    monkeypatch.setattr(native_pool, "threads", lambda: 2)
    monkeypatch.setattr(blas, "NATIVE_SINGLE_THREAD_FLOPS", 2000000)
    assert blas.native_ranges(1, 32, 256, 2 * 32 * 256 * 256) == gemm.pieces(1, 32, 256, 2)
    assert blas.native_ranges(1, 32, 256, 2 * 32 * 256 * 64) == [(0, 1, 0, 32, 0, 256)]
    monkeypatch.setattr(native_pool, "threads", lambda: 1)
    assert blas.native_ranges(1, 512, 512, 2 * 512 ** 3) == [(0, 1, 0, 512, 0, 512)]


# A scan RNN's step: a mid-size product (4.2 MFLOP: cut for the pool) and a fusion whose dot
# is too big for a fused kernel (a composite: its product, then the epilogue kernel).
SCAN = """HloModule scan_like
fused {
  x = f32[32,64]{1,0} parameter(0)
  u = f32[64,256]{1,0} parameter(1)
  d = f32[32,256]{1,0} dot(x, u), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h = f32[32,256]{1,0} parameter(2)
  a = f32[32,256]{1,0} add(h, d)
  ROOT t = f32[32,256]{1,0} tanh(a)
}
cond {
  p = (s32[], f32[32,256]{1,0}, f32[32,64]{1,0}, f32[64,256]{1,0}, f32[256,256]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(6)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[32,256]{1,0}, f32[32,64]{1,0}, f32[64,256]{1,0}, f32[256,256]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  h = f32[32,256]{1,0} get-tuple-element(p), index=1
  x = f32[32,64]{1,0} get-tuple-element(p), index=2
  u = f32[64,256]{1,0} get-tuple-element(p), index=3
  w = f32[256,256]{1,0} get-tuple-element(p), index=4
  hw = f32[32,256]{1,0} dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f = f32[32,256]{1,0} fusion(x, u, hw), kind=kOutput, calls=fused
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = (s32[], f32[32,256]{1,0}, f32[32,64]{1,0}, f32[64,256]{1,0}, f32[256,256]{1,0}) tuple(j, f, x, u, w)
}
ENTRY e {
  h0 = f32[32,256]{1,0} parameter(0)
  x = f32[32,64]{1,0} parameter(1)
  u = f32[64,256]{1,0} parameter(2)
  w = f32[256,256]{1,0} parameter(3)
  z = s32[] constant(0)
  init = (s32[], f32[32,256]{1,0}, f32[32,64]{1,0}, f32[64,256]{1,0}, f32[256,256]{1,0}) tuple(z, h0, x, u, w)
  loop = (s32[], f32[32,256]{1,0}, f32[32,64]{1,0}, f32[64,256]{1,0}, f32[256,256]{1,0}) while(init), condition=cond, body=body
  ROOT h = f32[32,256]{1,0} get-tuple-element(loop), index=1
}
"""
_SHAPES = [(32, 256), (32, 64), (64, 256), (256, 256)]


def _scan_args(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) / np.sqrt(s[0]) for s in _SHAPES]


def test_composites_run_inside_native_drivers(tmp_path):
    """The loop, its composite included, is one driver (its product step and its epilogue
    kernel in ["step", ...] slots); results match the interpreter, and the thunk-by-thunk
    run, a one-thread run and a run with both products shared with the pool bit for bit."""
    bundle = compile_bundle(SCAN, tmp_path / "s.bundle", passes="layout-assignment")
    meta = kernels_json(bundle)
    assert list(meta["composites"]) == ["f"]
    (driver,) = meta["drivers"]
    assert [s for s in driver["slots"] if s[0] == "step"] == [["step", ["f", 0]],
                                                              ["step", ["f", 1]]]
    exe = load_cpu(bundle)
    assert exe.describe()["steps"] == {"driver": 1}
    args = _scan_args(3)
    got = exe.run(args)
    assert_close(got, interpret(SCAN, args), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[0], exe.run_wrapped(args, lambda s, r: r)[0])
    script = ("import sys, numpy as np; from hloc.runtime import load; "
              "e = load(sys.argv[1], 'cpu'); a = dict(np.load(sys.argv[2])); "
              "np.save(sys.argv[3], e.run([a[f'arg{i}'] for i in range(4)])[0])")
    np.savez(tmp_path / "args.npz", **{f"arg{i}": a for i, a in enumerate(args)})
    # One thread; and both products (1 and 4.2 MFLOP) cut for a pool of two inside the driver.
    for k, env in enumerate(({"HLOC_CPU_THREADS": "1"},
                             {"HLOC_CPU_THREADS": "2", "HLOC_CPU_SPLIT_FLOPS": "1000000"})):
        out = tmp_path / f"run{k}.npy"
        done = subprocess.run([sys.executable, "-c", script, str(bundle),
                               str(tmp_path / "args.npz"), str(out)], text=True,
                              capture_output=True, env=dict(os.environ, **env))
        assert done.returncode == 0, done.stderr
        np.testing.assert_array_equal(np.load(out), got[0])


def test_a_worker_that_found_its_core_taken_sends_jobs_to_the_caller(pool):
    """While the pool's contention time is recent (a worker was descheduled while it spun),
    the caller runs every piece itself and wakes no worker; once it is old, pieces are shared
    again. The time is set here (far in the future, then long past) instead of by a worker."""
    _, own = pool
    run, me = _timed_job(pool, 6, 0.002, 0.01)
    words = own._state.view(np.int64)
    words[layout.CONTENDED_AT // 8] = 1 << 62  # later than any time-stamp counter reading
    assert run() == [me] * 6
    words[layout.CONTENDED_AT // 8] = 0
    for _ in range(5):
        if any(t != me for t in run()):
            break
    else:
        pytest.skip("no worker claimed a piece in five jobs (a very busy machine)")


@pytest.mark.parametrize("op,t,weighted", [("exponential", "f32", True), ("tanh", "bf16", True),
                                           ("multiply", "f32", False), ("power", "s32", False)])
def test_transcendental_elements_count_as_more_work(op, t, weighted, tmp_path):
    """A kernel's work (what decides the runtime's split across threads) counts each element
    of a float transcendental op as TRANSCENDENTAL_WORK operations: 65536 exps are split
    (2^18), 65536 multiplies or integer powers are not."""
    from hloc.codegen.cpu.thunk_kernels import TRANSCENDENTAL_WORK
    from hloc.runtime.cpu.parallel import MIN_PARALLEL_WORK

    operands = "x, x" if op in ("multiply", "power") else "x"
    text = (f"HloModule w\nENTRY e {{\n  x = {t}[256,256] parameter(0)\n"
            f"  ROOT y = {t}[256,256] {op}({operands})\n}}\n")
    (kernel,) = kernels_json(compile_bundle(text, tmp_path / "w.bundle"))["kernels"].values()
    assert kernel["work"] == 256 * 256 * (TRANSCENDENTAL_WORK if weighted else 1)
    assert (kernel["work"] >= MIN_PARALLEL_WORK) == weighted
