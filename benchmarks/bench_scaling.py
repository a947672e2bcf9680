"""Data-parallel scaling (issue 13): one training step on 1, 2 and 4 ranks, strong scaling.

The step is samples/generate_dist.py's dp_train_step at benchmark size (an MLP 64-512-8, SGD,
gradients all-reduced), partitioned by XLA for 1, 2 and 4 devices with the same global batch
of 1024 (benchmarks/cases/spmd/dp_scaling_nN: XLA's module, the global inputs and XLA's
outputs). hloc compiles each for the CPU and `hlo-run --processes N --benchmark K --expected`
times it (a step: the local run with its collectives, plus gathering the outputs on rank 0)
and checks the outputs against XLA's. Each rank runs its kernels on one thread
(HLOC_CPU_THREADS=1), so the speedup is that of the ranks alone. The rank counts alternate
for ROUNDS rounds, so load drifts hit all alike; the table gives the median of the rounds'
medians, the speedup t1/tN and the strong-scaling efficiency t1/(N*tN), and, where ranks
outnumber the cores (they then share them), the efficiency per core used, t1/(min(N,
cores)*tN). The fastest step of all rounds and the efficiency from those ("min") show what
is left when other processes on the machine preempt the ranks least.

Each round also runs `cores` independent one-rank jobs at once: their throughput against
one job alone ("capacity", ideally the core count) is the parallelism the machine gave at
the time, the bound on any speedup here (on a machine shared with other jobs, well below
the core count). HLOC_BENCH_SCALING_RANKS=1,2 picks the rank counts (1 must be among them).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = Path(__file__).resolve().parent / "cases" / "spmd"
RANKS = tuple(int(v) for v in os.environ.get("HLOC_BENCH_SCALING_RANKS", "1,2,4").split(","))
ROUNDS = 3
STEPS = 30


def _compile(n: int, out: Path) -> Path:
    from hloc.compiler import CompileOptions, compile

    bundle = out / f"dp_scaling_n{n}.bundle"
    compile(str(CASES / f"dp_scaling_n{n}.opt.pb"), str(bundle), CompileOptions(target="cpu"))
    return bundle


def _start(bundle: Path, n: int, report: Path) -> subprocess.Popen:
    """`hlo-run BUNDLE --processes n --benchmark STEPS --expected XLA's outputs`."""
    import hloc

    case = CASES / f"dp_scaling_n{n}"
    root = str(Path(hloc.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    env.setdefault("HLOC_CPU_THREADS", "1")
    tol = json.loads(case.with_suffix(".json").read_text())["tolerance"]
    cmd = [sys.executable, "-m", "hloc.cli.run", str(bundle), "--processes", str(n),
           "--inputs", f"{case}.inputs.npz", "--expected", f"{case}.expected.npz",
           "--rtol", str(tol["rtol"]), "--atol", str(tol["atol"]),
           "--benchmark", str(STEPS), "--report", str(report)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _finish(proc: subprocess.Popen, report: Path) -> tuple[float, float]:
    """(median, fastest) step seconds of a job; SystemExit if it failed or its outputs
    differ from XLA's."""
    out, _ = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"hlo-run failed ({proc.returncode}): {out.strip().splitlines()[-1:]}")
    bench = json.loads(report.read_text())["benchmark"]
    return bench["median_s"], bench["min_s"]


def _round(bundles: dict[int, Path], tmp: Path, cores: int) -> tuple[dict, float]:
    """One round: each rank count in turn, then `cores` one-rank jobs at once; (the step
    times per rank count, the capacity)."""
    times = {}
    for n, bundle in bundles.items():
        report = tmp / f"n{n}.json"
        times[n] = _finish(_start(bundle, n, report), report)
    reports = [tmp / f"c{i}.json" for i in range(cores)]
    procs = [_start(bundles[1], 1, r) for r in reports]
    together = statistics.median(_finish(p, r)[0] for p, r in zip(procs, reports, strict=True))
    return times, cores * times[1][0] / together


def main() -> int:
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        bundles = {n: _compile(n, Path(tmp)) for n in RANKS}
        rounds = [_round(bundles, Path(tmp), cores) for _ in range(ROUNDS)]
    step = {n: statistics.median(t[n][0] for t, _ in rounds) for n in RANKS}
    fastest = {n: min(t[n][1] for t, _ in rounds) for n in RANKS}
    capacity = statistics.median(c for _, c in rounds)
    print(f"strong scaling, global batch 1024, 1 thread per rank, {ROUNDS} rounds x {STEPS} "
          f"steps; outputs match XLA's. {cores} cores; capacity {capacity:.2f} ({cores} "
          f"one-rank jobs at once ran {capacity:.2f}x the steps of one alone)")
    print("ranks  batch/rank  ms/step  speedup  efficiency  eff/core  ms min  eff (min)")
    for n in RANKS:
        speedup = step[1] / step[n]
        note = f"  ({n} ranks share {cores} cores)" if n > cores else ""
        print(f"{n:>5}  {1024 // n:>10}  {step[n] * 1e3:>7.2f}  {speedup:>7.2f}  "
              f"{speedup / n:>10.2f}  {speedup / min(n, cores):>8.2f}  {fastest[n] * 1e3:>6.2f}"
              f"  {fastest[1] / (n * fastest[n]):>9.2f}{note}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
