"""hloc's CPU backend against XLA:CPU on the same modules and inputs, in the same run.

For every sample (samples/NAME.pb; `--ops` adds samples/ops) and every larger case
(benchmarks/cases/NAME.pb, see cases.py), hloc compiles the module (-O2, host CPU; without
module.s, a dump-only artifact) and runs it in-process; XLA compiles the same HloModuleProto and runs it in the jax venv
(benchmarks/xla_worker.py via JAXENV, default /work/jaxenv or .jaxenv). Prints the median run
time of each, their ratio (hloc/XLA: < 1 means hloc is faster; "min r" is the ratio of the
fastest runs, steadier on a busy machine), compile times (the fastest of three compiles on
each side), whether the outputs agree, and
geometric means per group. Each module is timed on both sides back to back.

`--cpu x86-64-v3` (or HLOC_BENCH_CPU, `make bench CPU=x86-64-v3`) measures a build for that
x86-64 level on any newer host, both sides restricted alike: hloc compiles `--cpu LEVEL`
bundles and its runtime GEMM and OpenBLAS use their kernels for that level (HLOC_CPU_GEMM,
HLOC_OPENBLAS_CORETYPE); XLA runs with XLA_FLAGS=--xla_cpu_max_isa=ISA. So an AVX-512
machine measures what an AVX2-only host would run.

    .venv/bin/python benchmarks/bench_cpu.py [--cases-only|--samples-only] [--ops] [-k SUBSTR]
        [--cpu x86-64-v3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))


def _jax_python() -> str | None:
    for candidate in (os.environ.get("JAXENV"), "/work/jaxenv", str(ROOT / ".jaxenv")):
        if candidate and Path(candidate, "bin", "python").exists():
            return str(Path(candidate, "bin", "python"))
    return None


# ---- the modules ------------------------------------------------------------------------------

def sample_jobs(ops: bool) -> list[dict]:
    from tests.conftest import SAMPLES, sample_arrays, sample_meta, sample_names

    names = sample_names() + (sample_names("ops") if ops else [])
    jobs = []
    for name in names:
        meta = sample_meta(name)
        jobs.append({"name": name, "group": "samples", "pb": str(SAMPLES / f"{name}.pb"),
                     "xla_inputs": str(SAMPLES / f"{name}.inputs.npz"),
                     "dtypes": [p["dtype"] for p in meta["params"]],
                     "args": lambda n=name: sample_arrays(n, "inputs"),
                     "rtol": meta["tolerance"]["rtol"] * 10, "atol": meta["tolerance"]["atol"] * 10})
    return jobs


def case_jobs(tmp: Path) -> list[dict]:
    from cases import CASES_DIR, case_inputs

    jobs = []
    for meta_path in sorted(CASES_DIR.glob("*.json")):
        meta = json.loads(meta_path.read_text())
        args = case_inputs(meta["params"])
        npz = tmp / f"{meta['name']}.inputs.npz"
        np.savez(npz, **{f"arg{i}": a for i, a in enumerate(args)})
        jobs.append({"name": "cases/" + meta["name"], "group": "cases", "pb": str(meta_path.with_suffix(".pb")),
                     "xla_inputs": str(npz), "dtypes": [p["dtype"].replace("float32", "f32")
                                                       for p in meta["params"]],
                     "args": lambda a=args: a, "rtol": 2e-3, "atol": 2e-4})
    return jobs


# x86-64 level -> (XLA's --xla_cpu_max_isa, hloc runtime environment for that level).
LEVELS = {
    "x86-64-v2": ("SSE4_2", {"HLOC_CPU_GEMM": "blas", "HLOC_OPENBLAS_CORETYPE": "Nehalem"}),
    "x86-64-v3": ("AVX2", {"HLOC_CPU_GEMM": "avx2", "HLOC_OPENBLAS_CORETYPE": "Haswell"}),
    "x86-64-v4": ("AVX512", {}),
}


def restrict_to_level(cpu: str | None) -> dict[str, str]:
    """Set this process's runtime environment for `cpu` (before any bundle is loaded) and
    return the environment of the XLA worker."""
    env = dict(os.environ)
    if not cpu:
        return env
    if cpu not in LEVELS:
        raise SystemExit(f"--cpu: expected one of {', '.join(LEVELS)}, got {cpu!r}")
    isa, runtime_env = LEVELS[cpu]
    os.environ.update(runtime_env)
    flags = os.environ.get("XLA_FLAGS", "")
    env["XLA_FLAGS"] = f"{flags} --xla_cpu_max_isa={isa}".strip()
    return env


SETTLE_SECONDS = 0.2
COMPILES = 3  # compile time: the fastest of this many compiles, on both sides

# ---- hloc side --------------------------------------------------------------------------------

def hloc_compile(pb: str, out: Path, cpu: str | None = None) -> float:
    from hloc.compiler import CompileOptions, compile

    start = time.perf_counter()
    compile(pb, str(out), CompileOptions(target="cpu", opt_level=2, cpu=cpu))
    return time.perf_counter() - start


def timed_runs(fn, seconds: float) -> list[float]:
    times: list[float] = []
    begin = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - begin < seconds and len(times) < 1000):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def prepare_hloc(job: dict, tmp: Path) -> dict:
    import hloc.runtime.cpu  # noqa: F401  (registers the device)
    from hloc.runtime import load

    bundle = tmp / (job["name"].replace("/", "_") + ".bundle")
    try:
        # The fastest of a few compiles (the XLA worker does the same).
        compile_s = min(hloc_compile(job["pb"], bundle, job.get("cpu"))
                        for _ in range(COMPILES))
        exe = load(str(bundle), "cpu")
        args = job["args"]()
        outputs = exe.run(args)
    except Exception as e:  # a failing module is a row, not the end of the benchmark
        return {"error": f"{type(e).__name__}: {e}"[:200]}
    return {"compile_s": compile_s, "times": [], "outputs": outputs,
            "run": lambda: exe.run(args)}


def compare(job: dict, tmp: Path, worker, seconds: float, rounds: int) -> tuple[dict, dict]:
    """Time both sides in alternating rounds, so load from other processes hits both. Each
    side compiles after a short pause, once the other side's worker threads (which may spin
    for a while after a run) are idle."""
    time.sleep(SETTLE_SECONDS)
    ours = prepare_hloc(job, tmp)
    theirs: dict = {}
    for round_index in range(rounds):
        if "error" not in ours:
            ours["times"] += timed_runs(ours["run"], seconds / rounds)
        if round_index == 0:
            time.sleep(SETTLE_SECONDS)  # the worker compiles on its first answer
        answer = worker.run(job)
        if "error" in answer:
            return ours, answer
        times = theirs.get("times", []) + answer["times"]
        theirs = {**answer, **theirs, "times": times}
    ours.pop("run", None)
    return ours, theirs


# ---- XLA side ---------------------------------------------------------------------------------

class XlaWorker:
    """The jax-venv process timing XLA, one module per request."""

    def __init__(self, tmp: Path, seconds: float, env: dict | None = None):
        self.python = _jax_python()
        self.tmp, self.seconds, self.env = tmp, seconds, env
        self.proc = None
        if self.python is None:
            print("no jax venv found (set JAXENV): XLA columns stay empty", file=sys.stderr)

    def _start(self) -> None:
        self.proc = subprocess.Popen([self.python, str(HERE / "xla_worker.py")], env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, job: dict) -> dict:
        if self.python is None:
            return {"error": "no jax venv"}
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        out = str(self.tmp / (job["name"].replace("/", "_") + ".xla.npz"))
        request = {"name": job["name"], "pb": job["pb"], "inputs": job["xla_inputs"],
                   "dtypes": job["dtypes"], "outputs": out, "seconds": self.seconds}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            status, self.proc = self.proc.wait(), None
            return {"error": f"XLA worker died (exit status {status})"}
        result = json.loads(line)
        if "error" not in result:
            with np.load(out) as z:
                result["outputs"] = [z[f"out{i}"] for i in range(len(z.files))]
        return result

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


# ---- report ----------------------------------------------------------------------------------

def _eps(dtype) -> float:
    import ml_dtypes

    try:
        return float(ml_dtypes.finfo(dtype).eps) if dtype.itemsize < 4 else 0.0
    except ValueError:
        return 0.0


def agree(ours: list, theirs: list, rtol: float, atol: float) -> str:
    if len(ours) != len(theirs):
        return "count"
    for a, b in zip(ours, theirs, strict=True):
        a = np.asarray(a)
        b = np.asarray(b).view(a.dtype) if np.asarray(b).dtype.itemsize == a.dtype.itemsize \
            else np.asarray(b)
        if a.shape != b.shape:
            return "shape"
        if a.dtype.kind in "biu":
            if not np.array_equal(a, b):
                return "DIFF"
            continue
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        # Narrow floats: one rounding step apart is agreement (XLA itself may compute an f16
        # op in f32 or in f16 depending on the form it compiles).
        tol = max(rtol, float(_eps(a.dtype)))
        if not np.allclose(a.astype(wide), b.astype(wide), rtol=tol, atol=atol, equal_nan=True):
            return "DIFF"
    return "ok"


def geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def report(jobs, ours, theirs) -> None:
    print(f"{'module':<34} {'hloc ms':>10} {'xla ms':>10} {'ratio':>7} {'min r':>7} "
          f"{'hloc cs':>8} {'xla cs':>8} {'c-ratio':>7}  out")
    groups: dict[str, tuple[list, list]] = {}
    for job in jobs:
        name, o, x = job["name"], ours[job["name"]], theirs.get(job["name"], {})
        if "error" in o or "error" in x or not x:
            print(f"{name[:34]:<34} {o.get('error') or x.get('error') or 'no XLA result'}")
            continue
        t_o, t_x = statistics.median(o["times"]), statistics.median(x["times"])
        ratio, cratio = t_o / t_x, o["compile_s"] / x["compile_s"]
        min_ratio = min(o["times"]) / min(x["times"])
        ok = agree(o["outputs"], x["outputs"], job["rtol"], job["atol"])
        g = groups.setdefault(job["group"], ([], []))
        g[0].append(ratio)
        g[1].append(cratio)
        print(f"{name[:34]:<34} {t_o * 1e3:>10.3f} {t_x * 1e3:>10.3f} {ratio:>7.2f} "
              f"{min_ratio:>7.2f} {o['compile_s']:>8.2f} {x['compile_s']:>8.2f} {cratio:>7.2f}  {ok}")
    for group, (ratios, cratios) in groups.items():
        print(f"{group}: geomean run ratio {geomean(ratios):.2f} (max {max(ratios):.2f}), "
              f"geomean compile ratio {geomean(cratios):.2f} over {len(ratios)} modules")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases-only", action="store_true")
    ap.add_argument("--samples-only", action="store_true")
    ap.add_argument("--ops", action="store_true", help="include samples/ops")
    ap.add_argument("-k", default="", help="only modules whose name contains this")
    ap.add_argument("--seconds", type=float, default=1.0, help="timing budget per module and side")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds per module")
    ap.add_argument("--cpu", default=os.environ.get("HLOC_BENCH_CPU") or None,
                    help="measure a build for this x86-64 level (x86-64-v3: AVX2) on both sides")
    args = ap.parse_args(argv)
    np.seterr(all="ignore")
    xla_env = restrict_to_level(args.cpu)
    print(f"cpu level: {args.cpu or 'host'}"
          + (f" (XLA_FLAGS={xla_env['XLA_FLAGS']})" if args.cpu else ""), flush=True)
    with tempfile.TemporaryDirectory(prefix="hloc-bench-") as d:
        tmp = Path(d)
        jobs = ([] if args.cases_only else sample_jobs(args.ops)) + \
            ([] if args.samples_only else case_jobs(tmp))
        jobs = [{**j, "cpu": args.cpu} for j in jobs if args.k in j["name"]]
        worker = XlaWorker(tmp, args.seconds / args.rounds, xla_env)
        ours, theirs = {}, {}
        try:
            for job in jobs:
                ours[job["name"]], theirs[job["name"]] = compare(job, tmp, worker, args.seconds,
                                                                 args.rounds)
        finally:
            worker.close()
        report(jobs, ours, theirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
