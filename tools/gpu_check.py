"""`make gpu-check`: hloc's `gpu` tests and GPU benchmarks against jax's XLA, on this GPU.

    PYTHONPATH=. python3 tools/gpu_check.py [--out gpu-check-out] [--budget 290] [-k SUBSTR]
                                            [--only tests,cases,models]
    PYTHONPATH=. python3 tools/gpu_check.py --dry-run      # what it would run; no GPU needed

Needs numpy, llvmlite, click, ml-dtypes, protobuf, cuda-bindings, ptxas on PATH, pytest
(pytest-xdist makes it faster) and, for the XLA columns, jax with CUDA. Runs `pytest -m gpu`;
meanwhile compiles every case of benchmarks/cases/ and every whole model of samples/models/
(NAME.pb, the lowered module: what XLA compiles too) for this GPU's arch (`--target cuda`,
several at a time). Then, one at a time, times each with hloc and the same module under XLA
GPU (tools/gpu_check_case.py): host to host (models: weights resident on both sides) and
device-resident, TF32 off on both sides. Every step runs in a subprocess with a timeout inside
--budget seconds: the tests get at most TEST_SHARE of it, the cases leave MODEL_SHARE to the
models, and a row with no time left says "skipped (budget)". Writes OUT/gpu-check.md (the
table, the pytest summary), OUT/results.json and OUT/pytest.log; prints the same.
Exit codes: 0 done (see the table), 1 tests or cases failed, 3 no NVIDIA GPU (one line
printed, nothing run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_report import failed, geomeans, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "benchmarks" / "cases"
MODELS_DIR = ROOT / "samples" / "models"
CASE = [sys.executable, str(ROOT / "tools" / "gpu_check_case.py")]
NO_GPU = 3
PARTS = ("tests", "cases", "models")
TEST_SHARE = 0.45  # of the budget, at most, for pytest (about 100 s on an H200)
MODEL_SHARE = 0.35  # of the budget the cases leave to the models
COMPILE_WORKERS = 6
COMPILE_TIMEOUT = 150  # s, per module
RUN_TIMEOUT = {"case": 60, "model": 120}  # s, per row and side
MIN_LEFT = {"case": 8, "model": 15}  # s: a side starts only with this much budget left
BENCH_SECONDS = 1.0  # per timing loop (host to host, device-resident), row and side
CASE_TOLERANCE = (2e-3, 2e-4)  # rtol, atol: benchmarks' agree() for the cases
# The models the table names first, so that a budget cut drops the others.
MODEL_ORDER = ("resnet50", "efficientnet_b0", "bert_encoder", "lstm", "mobilenet_v2",
               "gpt2_decoder", "cnn_train_step")


@dataclass(frozen=True)
class Job:
    """One benchmark row: a module, its inputs' JSON and how its outputs are judged."""

    kind: str  # "case" (benchmarks/cases) or "model" (samples/models)
    name: str
    resident: str = ""  # --resident SPEC on both sides, host to host ("" none)
    rtol: float = CASE_TOLERANCE[0]
    atol: float = CASE_TOLERANCE[1]

    @property
    def label(self) -> str:
        return self.name if self.kind == "case" else f"models/{self.name}"

    @property
    def pb(self) -> Path:
        return (CASES_DIR if self.kind == "case" else MODELS_DIR) / f"{self.name}.pb"

    @property
    def meta(self) -> Path:
        return self.pb.with_suffix(".json")

    @property
    def reference(self) -> Path | None:
        """Outputs to compare with when XLA GPU gives none (the models' XLA:CPU outputs)."""
        return MODELS_DIR / f"{self.name}.expected.npz" if self.kind == "model" else None

    def bundle(self, out: Path) -> Path:
        return out / "bundles" / f"{self.kind}-{self.name}.bundle"

    def dir(self, out: Path) -> Path:
        return out / f"{self.kind}s" / self.name


def case_names(pattern: str = "") -> list[str]:
    return sorted(p.stem for p in CASES_DIR.glob("*.pb")  # a case is a module + its json
                  if pattern in p.stem and p.with_suffix(".json").exists())


def _weights():
    """samples/models/weights.py (model names, JSONs), loaded as the model tests load it."""
    spec = importlib.util.spec_from_file_location("model_weights", MODELS_DIR / "weights.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ranges(numbers) -> str:
    """`0-3,7` for {0, 1, 2, 3, 7}: a --resident spec."""
    parts, numbers = [], sorted(numbers)
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        parts.append(str(numbers[i]) if i == j else f"{numbers[i]}-{numbers[j]}")
        i = j + 1
    return ",".join(parts)


def weight_spec(params: list[dict]) -> str:
    """The parameters a serving process keeps on the device: all but the data inputs (the
    JSON names those `x:...`, the weights `w:...`)."""
    return ranges(i for i, p in enumerate(params) if not p.get("name", "").startswith("x:"))


def model_jobs(pattern: str = "") -> list[Job]:
    weights = _weights()
    jobs = []
    names = weights.model_names()
    rank = {n: i for i, n in enumerate(MODEL_ORDER)}
    for name in sorted(names, key=lambda n: (rank.get(n, len(rank)), n)):
        if pattern not in f"models/{name}":
            continue
        meta = weights.meta(name)
        tol = meta.get("tolerance", {})
        jobs.append(Job("model", name, weight_spec(meta["params"]),
                        tol.get("rtol", CASE_TOLERANCE[0]), tol.get("atol", CASE_TOLERANCE[1])))
    return jobs


def select_jobs(parts: tuple[str, ...], pattern: str) -> list[Job]:
    jobs = [Job("case", n) for n in case_names(pattern)] if "cases" in parts else []
    return jobs + (model_jobs(pattern) if "models" in parts else [])


@dataclass(frozen=True)
class Setup:
    """Where results go, the arch compiled for, and how the sides run: `emulated` tries the
    whole check without a GPU (hloc on cuda-emulated, XLA on its CPU backend: timings mean
    nothing); `xla_python` runs the XLA side with another interpreter (jax in its own venv)."""

    out: Path
    arch: str = "sm_90"
    emulated: bool = False
    xla_python: str | None = None


def compile_command(job: Job, setup: Setup) -> list[str]:
    return CASE + ["compile", str(job.pb), str(job.bundle(setup.out)), "--arch", setup.arch]


def side_command(job: Job, side: str, setup: Setup) -> list[str]:
    out = setup.out
    script = CASE if side == "hloc" or not setup.xla_python else [setup.xla_python, CASE[1]]
    src = job.bundle(out) if side == "hloc" else job.pb
    cmd = script + [side, str(job.meta), str(src), str(job.dir(out)),
                    "--seconds", str(BENCH_SECONDS)]
    if job.resident:
        cmd += ["--resident", job.resident]
    if setup.emulated:
        cmd += ["--device", "cuda-emulated"] if side == "hloc" else ["--platform", "cpu"]
    return cmd


def pytest_command(workers: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
           "tests"]
    return cmd + (["-n", str(workers)] if workers else [])


def _xdist_workers() -> int | None:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return None
    return max(2, min(8, (os.cpu_count() or 2) // 2))


def plan(setup: Setup, pattern: str, parts: tuple[str, ...] = PARTS) -> list[str]:
    """The steps, as the lines --dry-run prints."""
    lines = [" ".join(pytest_command(_xdist_workers()))] if "tests" in parts else []
    for job in select_jobs(parts, pattern):
        lines.append(" ".join(compile_command(job, setup)))
        lines += [" ".join(side_command(job, side, setup)) for side in ("hloc", "xla")]
    return lines


# ---- running --------------------------------------------------------------------------------

def run_step(cmd: list[str], timeout: float, log: Path | None = None,
             nice: bool = False) -> tuple[int, str]:
    """(exit code, output) of a subprocess; 124 when it ran past `timeout`: then it and every
    process it started (its own process group) are killed. `nice`: at a lower priority."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if nice and shutil.which("nice"):
        cmd = ["nice", "-n", "10"] + cmd
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace",
                                start_new_session=True)
    except OSError as e:
        return 127, f"{cmd[0]}: {e}"
    try:
        text, _ = proc.communicate(timeout=max(1.0, timeout))
        code = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        text, _ = proc.communicate()
        code, text = 124, (text or "") + f"\n[timed out after {timeout:.0f} s]\n"
    if log is not None:
        log.write_text(text)
    return code, text


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # pytest's xdist workers, hlo compile's child
    except (ProcessLookupError, PermissionError):
        proc.kill()


def pytest_summary(text: str, code: int) -> str:
    """The last `N passed, M failed ...` line, or why there is none."""
    for line in reversed(text.strip().splitlines()):
        if re.search(r"\d+ (passed|failed|error|skipped|deselected)", line):
            return line.strip("= ").strip()
    return "timed out" if code == 124 else f"pytest exited with {code}, no summary"


class Deadline:
    """Seconds left of the whole check's budget (or of a part of it)."""

    def __init__(self, seconds: float, end: float | None = None):
        self.end = time.monotonic() + seconds if end is None else end

    def left(self) -> float:
        return self.end - time.monotonic()

    def earlier(self, seconds: float) -> Deadline:
        return Deadline(0, self.end - seconds)


def compile_all(jobs: list[Job], setup: Setup, deadline: Deadline) -> dict[str, str]:
    """Compile every module, several at a time: label -> "" or why it failed."""
    (setup.out / "bundles").mkdir(parents=True, exist_ok=True)

    def one(job: Job) -> str:
        timeout = min(COMPILE_TIMEOUT, deadline.left() - 30)
        if timeout < 5:
            return "skipped (budget)"
        code, text = run_step(compile_command(job, setup), timeout, nice=True)
        return "" if code == 0 else ("compile timed out" if code == 124
                                     else "compile failed: " + text.strip()[-160:])

    with ThreadPoolExecutor(COMPILE_WORKERS) as pool:
        return dict(zip([j.label for j in jobs], pool.map(one, jobs), strict=True))


def run_side(job: Job, side: str, setup: Setup, deadline: Deadline) -> dict:
    """One side of a row in its subprocess: what it wrote, or why there is nothing."""
    if deadline.left() < MIN_LEFT[job.kind]:
        return {"error": "skipped (budget)"}
    timeout = min(RUN_TIMEOUT[job.kind], deadline.left() - 2)
    code, text = run_step(side_command(job, side, setup), timeout)
    result = job.dir(setup.out) / f"{side}.json"
    if code == 124:
        return {"error": "timed out" if timeout >= RUN_TIMEOUT[job.kind] else
                f"stopped after {timeout:.0f} s (budget)"}
    if not result.exists():
        return {"error": f"exit {code}: " + text.strip()[-160:]}
    try:
        return json.loads(result.read_text())
    except ValueError as e:
        return {"error": f"unreadable {result.name}: {e}"}


def bench_job(job: Job, setup: Setup, deadline: Deadline) -> dict:
    """Both sides of one compiled row, one after the other (timings never overlap)."""
    out = setup.out
    for side in ("hloc", "xla"):  # no stale results from an earlier run
        for suffix in (".json", ".npz"):
            (job.dir(out) / f"{side}{suffix}").unlink(missing_ok=True)
    row = {"case": job.label, "kind": job.kind, "resident": job.resident}
    for side in ("hloc", "xla"):
        row[side] = run_side(job, side, setup, deadline)
    row["match"] = outputs_match(job.dir(out), job.rtol, job.atol, job.reference)
    return row


def bench_all(jobs: list[Job], compiled: dict[str, str], setup: Setup, deadline: Deadline,
              budget: float) -> list[dict]:
    """Every row in order; the cases stop MODEL_SHARE of the budget early when models
    follow, so the models get their share."""
    models_follow = any(j.kind == "model" for j in jobs)
    cases_deadline = deadline.earlier(MODEL_SHARE * budget) if models_follow else deadline
    rows = []
    for job in jobs:
        part = cases_deadline if job.kind == "case" else deadline
        if compiled[job.label]:
            rows.append({"case": job.label, "kind": job.kind, "hloc": {"error": compiled[job.label]},
                         "xla": {}, "match": "-"})
        elif part.left() < MIN_LEFT[job.kind]:
            rows.append({"case": job.label, "kind": job.kind, "hloc": {}, "xla": {},
                         "match": "-", "note": "skipped (budget)"})
        else:
            rows.append(bench_job(job, setup, part))
    return rows


def outputs_match(job_dir: Path, rtol: float, atol: float, reference: Path | None = None) -> str:
    """"yes"/"no" as benchmarks' agree() judges hloc's outputs against XLA GPU's, else
    against `reference` ("yes (vs expected.npz)"); "-" without outputs to compare."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_cpu import agree

    ours = _arrays(job_dir / "hloc.npz")
    if not ours:
        return "-"
    for path, suffix in ((job_dir / "xla.npz", ""), (reference, " (vs expected.npz)")):
        theirs = _arrays(path) if path is not None else []
        if theirs:
            verdict = agree(ours, [np.asarray(t) for t in theirs], rtol, atol)
            return ("yes" if verdict == "ok" else "no") + suffix
    return "-"


def _arrays(path: Path) -> list:
    """out0, out1, ... of an npz, [] if missing or unreadable."""
    import numpy as np

    if not path.exists():
        return []
    try:
        with np.load(path) as z:
            return [z[k] for k in sorted(z.files, key=lambda k: int(k[3:]))]
    except (OSError, ValueError):
        return []


# ---- main -----------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu-check-out", help="directory for the results")
    p.add_argument("--budget", type=float, default=290.0, help="seconds for the whole check")
    p.add_argument("-k", dest="pattern", default="",
                   help="only cases and models whose name (models/NAME) has this")
    p.add_argument("--only", default=",".join(PARTS),
                   help="comma-separated parts to run: tests, cases, models (default: all)")
    p.add_argument("--skip-tests", action="store_true", help="same as --only cases,models")
    p.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    p.add_argument("--arch", default=None, help="sm_XX (default: the GPU's)")
    p.add_argument("--xla-python", default=None,
                   help="the Python that runs the XLA side (one with jax; default: this one)")
    p.add_argument("--xla-deterministic", action="store_true",
                   help="XLA with --xla_gpu_exclude_nondeterministic_ops (hloc is deterministic "
                        "unless HLOC_CUDA_DETERMINISTIC=0)")
    p.add_argument("--emulated", action="store_true",
                   help="try it without a GPU: hloc on cuda-emulated, XLA on CPU (timings "
                        "mean nothing)")
    args = p.parse_args(argv)
    parts = tuple(x.strip() for x in args.only.split(",") if x.strip())
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"--only: unknown part(s) {', '.join(unknown)} (choose from {', '.join(PARTS)})")
    args.parts = tuple(x for x in parts if not (args.skip_tests and x == "tests"))
    if args.xla_deterministic:
        os.environ["GPU_CHECK_XLA_DETERMINISTIC"] = "1"  # the XLA side's processes inherit it
    return args


def detect_gpu() -> tuple[str, str] | None:
    """(device name, sm_XY) of GPU 0, or None without a usable NVIDIA GPU."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        return None
    try:
        if cu.cuInit(0)[0] != cu.CUresult.CUDA_SUCCESS or cu.cuDeviceGetCount()[1] < 1:
            return None
        dev = cu.cuDeviceGet(0)[1]
        attr = cu.CUdevice_attribute
        major = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)[1]
        minor = cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)[1]
        name = cu.cuDeviceGetName(64, dev)[1]
        name = name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name)
    except Exception:  # a driver without a device, a broken install: "no GPU"
        return None
    return name, f"sm_{major}{minor}"


def run_tests(out: Path, budget: float) -> str:
    code, text = run_step(pytest_command(_xdist_workers()), budget * TEST_SHARE,
                          out / "pytest.log")
    return pytest_summary(text, code)


def write_results(out: Path, device, summary: str, rows: list[dict], seconds: float,
                  budget: float) -> str:
    text = report(device, summary, rows, seconds)
    (out / "gpu-check.md").write_text(text)
    results = {"device": list(device), "pytest": summary, "seconds": seconds, "budget": budget,
               "geomeans": geomeans(rows), "rows": rows}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    return text


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    setup = Setup(out, args.arch or "sm_90", args.emulated, args.xla_python)
    if args.dry_run:
        print("\n".join(plan(setup, args.pattern, args.parts)))
        return 0
    device = ("cuda-emulated", setup.arch) if args.emulated else detect_gpu()
    if device is None:
        print("gpu-check: no NVIDIA GPU (or cuda-bindings) found; nothing run")
        return NO_GPU
    device = (device[0], args.arch or device[1])
    setup = Setup(out, device[1], args.emulated, args.xla_python)
    start, deadline = time.monotonic(), Deadline(args.budget)
    out.mkdir(parents=True, exist_ok=True)
    jobs = select_jobs(args.parts, args.pattern)
    with ThreadPoolExecutor(1) as pool:  # the compiles run while the tests do
        tests = pool.submit(run_tests, out, args.budget) if "tests" in args.parts else None
        compiled = compile_all(jobs, setup, deadline)
        summary = tests.result() if tests is not None else "not run (--only)"
    rows = bench_all(jobs, compiled, setup, deadline, args.budget)
    text = write_results(out, device, summary, rows, time.monotonic() - start, args.budget)
    print(text)
    return 1 if failed(summary, rows) else 0


if __name__ == "__main__":
    sys.exit(main())
