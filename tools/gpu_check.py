"""`make gpu-check`: hloc's `gpu` tests and GPU benchmarks against jax's XLA, on this GPU.

    PYTHONPATH=. python3 tools/gpu_check.py [--out gpu-check-out] [--budget 290] [-k SUBSTR]
    PYTHONPATH=. python3 tools/gpu_check.py --dry-run      # what it would run; no GPU needed

Needs numpy, llvmlite, click, ml-dtypes, protobuf, cuda-bindings, ptxas on PATH, pytest
(pytest-xdist makes it faster) and, for the XLA column, jax with CUDA. Runs `pytest -m gpu`,
then compiles every case of benchmarks/cases/ for this GPU's arch (`--target cuda`), times it
with hlo-run's benchmark loop (host arrays in and out) and the same module under XLA GPU,
TF32 off on both sides. Every step runs in a subprocess with a timeout inside --budget
seconds. Writes OUT/gpu-check.md (the table and the pytest summary), OUT/results.json and
OUT/pytest.log; prints the same. Exit codes: 0 done (see the table), 1 tests or cases failed,
3 no NVIDIA GPU (one line printed, nothing run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "benchmarks" / "cases"
CASE = [sys.executable, str(ROOT / "tools" / "gpu_check_case.py")]
NO_GPU = 3
TEST_SHARE = 0.4  # of the budget, at most, for pytest
COMPILE_TIMEOUT = 120  # s, per case
RUN_TIMEOUT = 60  # s, per case and side
BENCH_SECONDS = 1.0  # timed runs per case and side


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


def case_names(pattern: str = "") -> list[str]:
    return sorted(p.stem for p in CASES_DIR.glob("*.pb")  # a case is a module + its json
                  if pattern in p.stem and p.with_suffix(".json").exists())


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


def plan(out: Path, arch: str, pattern: str) -> list[str]:
    """The steps, as the lines --dry-run prints."""
    lines = [" ".join(pytest_command(_xdist_workers()))]
    for name in case_names(pattern):
        bundle = out / "bundles" / f"{name}.bundle"
        lines.append(" ".join(CASE + ["compile", str(CASES_DIR / f"{name}.pb"), str(bundle),
                                      "--arch", arch]))
        for side, src in (("hloc", bundle), ("xla", CASES_DIR / f"{name}.pb")):
            lines.append(" ".join(CASE + [side, str(CASES_DIR / f"{name}.json"), str(src),
                                          str(out / "cases" / name)]))
    return lines


# ---- running --------------------------------------------------------------------------------

def run_step(cmd: list[str], timeout: float, log: Path | None = None) -> tuple[int, str]:
    """(exit code, output) of a subprocess; 124 when it ran past `timeout` (then killed)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=max(1.0, timeout))
        code, text = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        code = 124
        text = _text(e.stdout) + _text(e.stderr) + f"\n[timed out after {timeout:.0f} s]\n"
    if log is not None:
        log.write_text(text)
    return code, text


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def pytest_summary(text: str, code: int) -> str:
    """The last `N passed, M failed ...` line, or why there is none."""
    for line in reversed(text.strip().splitlines()):
        if re.search(r"\d+ (passed|failed|error|skipped|deselected)", line):
            return line.strip("= ").strip()
    return "timed out" if code == 124 else f"pytest exited with {code}, no summary"


class Deadline:
    """Seconds left of the whole check's budget."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def compile_all(names: list[str], out: Path, arch: str, deadline: Deadline) -> dict[str, str]:
    """Compile every case in parallel: name -> "" or why it failed."""
    (out / "bundles").mkdir(parents=True, exist_ok=True)

    def one(name: str) -> str:
        cmd = CASE + ["compile", str(CASES_DIR / f"{name}.pb"),
                      str(out / "bundles" / f"{name}.bundle"), "--arch", arch]
        code, text = run_step(cmd, min(COMPILE_TIMEOUT, deadline.left() - 30))
        return "" if code == 0 else ("compile timed out" if code == 124
                                     else "compile failed: " + text.strip()[-160:])

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(names, pool.map(one, names), strict=True))


def bench_case(name: str, out: Path, deadline: Deadline) -> dict:
    """Both sides of one compiled case, one after the other (timings not disturbed)."""
    row: dict = {"case": name}
    sides = (("hloc", out / "bundles" / f"{name}.bundle"), ("xla", CASES_DIR / f"{name}.pb"))
    for side, src in sides:
        if deadline.left() < 10:
            row[side] = {"error": "out of time"}
            continue
        cmd = CASE + [side, str(CASES_DIR / f"{name}.json"), str(src), str(out / "cases" / name),
                      "--seconds", str(BENCH_SECONDS)]
        code, text = run_step(cmd, min(RUN_TIMEOUT, deadline.left() - 5))
        result = out / "cases" / name / f"{side}.json"
        row[side] = (json.loads(result.read_text()) if result.exists() and code != 124
                     else {"error": "timed out" if code == 124 else text.strip()[-160:]})
    row["match"] = outputs_match(out / "cases" / name)
    return row


def outputs_match(case_dir: Path) -> str:
    """"yes"/"no" as benchmarks' agree() judges (rtol 2e-3, atol 2e-4), "-" if a side is
    missing."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_cpu import agree

    files = [case_dir / f"{s}.npz" for s in ("hloc", "xla")]
    if not all(f.exists() for f in files):
        return "-"
    with np.load(files[0]) as a, np.load(files[1]) as b:
        ours, theirs = [a[k] for k in _ordered(a.files)], [b[k] for k in _ordered(b.files)]
    if not ours or not theirs:
        return "-"
    return "yes" if agree(ours, theirs, 2e-3, 2e-4) == "ok" else "no"


def _ordered(keys) -> list[str]:
    return sorted(keys, key=lambda k: int(k[3:]))


# ---- report ---------------------------------------------------------------------------------

def _ms(side: dict) -> str:
    return f"{side['median_ms']:.3f}" if "median_ms" in side else "-"


def format_table(rows: list[dict]) -> str:
    """One markdown table: case, hloc ms, XLA ms, ratio (hloc / XLA), match, notes."""
    lines = ["| case | hloc ms | XLA ms | ratio | match | notes |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ours, theirs = r.get("hloc", {}), r.get("xla", {})
        ratio = (f"{ours['median_ms'] / theirs['median_ms']:.2f}"
                 if "median_ms" in ours and theirs.get("median_ms") else "-")
        notes = "; ".join(f"{k}: {v['error']}" for k, v in (("hloc", ours), ("xla", theirs))
                          if "error" in v)
        notes = notes.replace("|", "/").replace("\n", " ")[:200]
        lines.append(f"| {r['case']} | {_ms(ours)} | {_ms(theirs)} | {ratio} "
                     f"| {r.get('match', '-')} | {notes} |")
    return "\n".join(lines)


def report(device: tuple[str, str], summary: str, rows: list[dict], seconds: float) -> str:
    return (f"# gpu-check on {device[0]} ({device[1]})\n\n"
            f"pytest -m gpu: {summary}\n\n{format_table(rows)}\n\n"
            f"ratio = hloc / XLA (host arrays in and out, median); {seconds:.0f} s in all\n")


# ---- main -----------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="gpu-check-out", help="directory for the results")
    p.add_argument("--budget", type=float, default=290.0, help="seconds for the whole check")
    p.add_argument("-k", dest="pattern", default="", help="only cases whose name has this")
    p.add_argument("--skip-tests", action="store_true", help="benchmarks only")
    p.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    p.add_argument("--arch", default=None, help="sm_XX (default: the GPU's)")
    return p.parse_args(argv)


def run_tests(out: Path, deadline: Deadline, budget: float) -> str:
    code, text = run_step(pytest_command(_xdist_workers()), budget * TEST_SHARE,
                          out / "pytest.log")
    return pytest_summary(text, code)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    if args.dry_run:
        print("\n".join(plan(out, args.arch or "sm_90", args.pattern)))
        return 0
    device = detect_gpu()
    if device is None:
        print("gpu-check: no NVIDIA GPU (or cuda-bindings) found; nothing run")
        return NO_GPU
    device = (device[0], args.arch or device[1])
    start, deadline = time.monotonic(), Deadline(args.budget)
    out.mkdir(parents=True, exist_ok=True)
    names = case_names(args.pattern)
    with ThreadPoolExecutor(1) as pool:  # compiles run while the tests do
        tests = None if args.skip_tests else pool.submit(run_tests, out, deadline, args.budget)
        compiled = compile_all(names, out, device[1], deadline)
        summary = tests.result() if tests is not None else "skipped"
    rows = []
    for name in names:
        if compiled[name]:
            rows.append({"case": name, "hloc": {"error": compiled[name]}, "match": "-"})
            continue
        rows.append(bench_case(name, out, deadline))
    text = report(device, summary, rows, time.monotonic() - start)
    (out / "gpu-check.md").write_text(text)
    (out / "results.json").write_text(json.dumps({"device": device, "pytest": summary,
                                                  "rows": rows}, indent=1))
    print(text)
    bad = "failed" in summary or "error" in summary or any(r.get("match") == "no" for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
