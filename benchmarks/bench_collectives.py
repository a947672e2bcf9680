"""Collective bandwidth (issue 13): hloc's MPI communicator vs raw mpi4py, same buffers, same run.

Launches itself under the environment's mpiexec with 2 and 4 ranks. Each rank times, on
4 MiB and 64 MiB of f32, raw mpi4py (blocking `Allreduce(SUM)` / `Allgather`, the baseline a
user writing MPI by hand gets) and `MpiCommunicator.all_reduce` / `all_gather` (what a
collective runs through in hloc: nonblocking, polled without spinning, with a timeout) into
the same output buffers (as a collective thunk passes its result buffers as `out=`), the two
alternating (raw first on even repetitions, hloc first on odd ones) so load drifts hit both
alike. Rank 0 prints the median bus bandwidth (bytes x 2(n-1)/n / time for all-reduce,
bytes x (n-1)/n for all-gather, per rank), the ratio hloc / raw of the medians (target >=
0.9) and the median of the per-repetition ratios ("paired", steadier on a busy machine). With more ranks than cores MPICH's blocking calls spin
and can take seconds each; a case then stops after CASE_S seconds. HLOC_BENCH_RANKS=2,4 and
HLOC_BENCH_MIB=4,64 pick the cases. The data-parallel training step's scaling over 1, 2 and
4 ranks is bench_scaling.py.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIZES_MIB = tuple(int(v) for v in os.environ.get("HLOC_BENCH_MIB", "4,64").split(","))
RANKS = tuple(int(v) for v in os.environ.get("HLOC_BENCH_RANKS", "2,4").split(","))
REPS = {4: 40, 64: 5}
CASE_S = 20.0


def _time(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _cases(MPI, world, hloc_comm, x: np.ndarray):
    from hloc.collectives.reducers import Reducer

    n, group = world.Get_size(), list(range(world.Get_size()))
    red, gathered = np.empty_like(x), np.empty(x.size * n, x.dtype)
    add = Reducer("add")
    return {
        "all-reduce": (lambda: world.Allreduce(x, red, MPI.SUM),
                       lambda: hloc_comm.all_reduce("b", group, world.Get_rank(), [x], add,
                                                    out=[red]),
                       2 * (n - 1) / n),
        "all-gather": (lambda: world.Allgather(x, gathered),
                       lambda: hloc_comm.all_gather("b", group, world.Get_rank(), [x],
                                                    out=[gathered]),
                       (n - 1) / n),
    }


def worker() -> None:
    from hloc.collectives.mpi import MpiCommunicator, import_mpi

    MPI = import_mpi()
    world = MPI.COMM_WORLD
    comm = MpiCommunicator(world, list(range(world.Get_size())))
    for mib in SIZES_MIB:
        x = np.random.default_rng(world.Get_rank()).standard_normal(mib << 18).astype(np.float32)
        for name, (raw, ours, factor) in _cases(MPI, world, comm, x).items():
            raw(), ours()  # warm-up: connections, sub-communicators, page faults
            t_raw: list[float] = []
            t_ours: list[float] = []
            for rep in range(REPS[mib]):
                # Blocking MPI spins; with more ranks than cores one op can take seconds:
                # stop the case after CASE_S (rank 0 decides, every rank follows).
                if world.bcast(sum(t_raw) + sum(t_ours) > CASE_S, root=0):
                    break
                for fn, times in [(raw, t_raw), (ours, t_ours)][::1 if rep % 2 == 0 else -1]:
                    world.Barrier()
                    times += _time(fn, 1)
            r, o = statistics.median(t_raw), statistics.median(t_ours)
            paired = statistics.median(a / b for a, b in zip(t_raw, t_ours, strict=True))
            if world.Get_rank() == 0:  # each row as it is measured
                moved, n = x.nbytes * factor, world.Get_size()
                print(f"{name:<11} {mib:>4} MiB {n:>5}  {r * 1e3:>9.2f} {moved / r / 1e9:>8.2f}"
                      f"  {o * 1e3:>9.2f} {moved / o / 1e9:>8.2f}  {r / o:>6.2f}  {paired:>6.2f}",
                      flush=True)


def main() -> int:
    from hloc.cli.launch import _command

    print("collective  size      ranks  raw ms    raw GB/s  hloc ms   hloc GB/s  hloc/raw  paired")
    status = 0
    for n in RANKS:
        cmd, env = _command(n, [])
        cmd = cmd[:cmd.index(sys.executable) + 1] + [str(Path(__file__).resolve()), "--worker"]
        status |= subprocess.call(cmd, env=env)
    return status


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    else:
        sys.exit(main())
