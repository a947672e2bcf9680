"""One side of one gpu_check benchmark row, run in its own process (a hang or crash costs
that row only; tools/gpu_check.py gives each a timeout).

    python3 tools/gpu_check_case.py compile MODULE.pb BUNDLE --arch sm_90
    python3 tools/gpu_check_case.py hloc META.json BUNDLE    OUTDIR [--seconds S] [--resident SPEC]
    python3 tools/gpu_check_case.py xla  META.json MODULE.pb OUTDIR [--seconds S] [--resident SPEC]

`compile` runs `hloc compile --target cuda`. `hloc` runs the bundle on the GPU through the
runtime hlo-run uses; `xla` compiles the same HloModuleProto with jax's XLA GPU. Each side
times two things on the same inputs:

- host to host: inputs uploaded, the module run, outputs copied back to host arrays, every run
  (hlo-run's benchmark loop; for XLA device_put, execute, np.asarray). The parameters that
  --resident SPEC names (hloc.runtime.cuda.residency's specs: `all`, `1-320`, ...) stay on the
  device instead, as in a serving process: hloc's `set_resident`, and for XLA arrays put on the
  device once and passed to every run.
- device-resident: every input uploaded once before timing, outputs left on the device, each
  run synchronized (hloc's `time_device_resident`; XLA's execute + block_until_ready).

META.json is a benchmark case's (benchmarks/cases.py draws its inputs) or a whole model's
(samples/models/NAME.json, with a seed: samples/models/weights.py rebuilds its arguments);
an .npz in its place gives the arguments themselves (arg0, arg1, ...), to time any module.
Writes OUTDIR/SIDE.json ({"host_ms", "resident_ms", "runs", ...} or {"error"}; a failed
device-resident timing is "resident_error") and OUTDIR/SIDE.npz (the outputs of one run).
TF32 is off on both sides (NVIDIA_TF32_OVERRIDE=0, jax_default_matmul_precision=highest).
--device (hloc) and --platform (XLA) exist to try this script without a GPU (cuda-emulated,
cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "samples" / "models"))
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
# XLA's Triton GEMMs use TF32 for DEFAULT-precision f32 dots whatever NVIDIA_TF32_OVERRIDE says
# (scan_rnn_200 on an H200: 0.085 max error against f32 with them, 1.4e-4 without); cuBLAS
# honours the override, so XLA runs its dots through cuBLAS here: full f32 on both sides.
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")
# gpu_check --xla-deterministic: XLA with only deterministic kernels too, as hloc runs by default
# (HLOC_CUDA_DETERMINISTIC): like against like where XLA would pick atomics (cuDNN's fast
# weight-gradient algorithms, scatters).
if os.environ.get("GPU_CHECK_XLA_DETERMINISTIC") == "1":
    os.environ["XLA_FLAGS"] += " --xla_gpu_exclude_nondeterministic_ops=true"
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def inputs(meta_path: str) -> list[np.ndarray]:
    """Every argument of the module: a model's from its seed, a case's from cases.py, or
    an .npz's arrays (arg0, arg1, ...: what `hlo-run --inputs` reads)."""
    if meta_path.endswith(".npz"):
        with np.load(meta_path) as z:
            return [z[f"arg{i}"] for i in range(len(z.files))]
    meta = json.loads(Path(meta_path).read_text())
    if "seed" in meta:  # samples/models/NAME.json
        import weights

        return weights.arrays(meta)
    from cases import case_inputs

    return case_inputs(meta["params"])


def resident_numbers(spec: str, count: int) -> frozenset[int]:
    from hloc.runtime.cuda.residency import parse_spec

    return parse_spec(spec, count) if spec else frozenset()


def _count(once_s: float, seconds: float) -> int:
    """Timed runs for about `seconds` (at least 3, at most 100)."""
    return max(3, min(100, int(seconds / max(once_s, 1e-6))))


def _ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


def compile_case(pb: str, bundle: str, arch: str) -> int:
    pb, bundle = str(Path(pb).resolve()), str(Path(bundle).resolve())  # the CLI runs in ROOT
    Path(bundle).parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "hloc.cli.main", "compile", pb, "-o", bundle,
           "--target", "cuda", "--cuda-arch", arch]
    return subprocess.call(cmd, cwd=ROOT)


# ---- hloc -----------------------------------------------------------------------------------

def run_hloc(meta: str, bundle: str, o: argparse.Namespace) -> tuple[dict, list]:
    from hloc.runtime import load

    exe = load(bundle, o.device)
    args = inputs(meta)
    kept = exe.set_resident(resident_numbers(o.resident, len(args))) if o.resident else ()
    outputs = exe.run(args)  # lazy initialization; uploads the resident parameters
    start = time.perf_counter()
    exe.run(args)
    n = _count(time.perf_counter() - start, o.seconds)
    host = []
    for _ in range(n):  # hlo-run's benchmark loop (hloc.cli.run._benchmark)
        start = time.perf_counter()
        exe.run(args)
        host.append(time.perf_counter() - start)
    result = {"host_ms": _ms(host), "runs": n, "resident_params": len(kept)}
    # Inputs staged once (resident or not), then the main program alone, synchronized.
    _time_resident(result, lambda: exe.time_device_resident(args, n))
    return result, outputs


def _time_resident(result: dict, timer) -> None:
    """result["resident_ms"] from `timer()` (a list of seconds), or why it failed."""
    try:
        result["resident_ms"] = _ms(timer())
    except Exception as e:  # the host-to-host figure stands
        result["resident_error"] = f"{type(e).__name__}: {e}"[:300]


# ---- XLA ------------------------------------------------------------------------------------

def _xla_executable(pb: bytes, platform: str):
    """XLA's executable for an HloModuleProto (the calls xla_worker.py makes, with the
    spellings newer jaxlibs use as fallbacks) and its device."""
    import jax
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    jax.config.update("jax_default_matmul_precision", "highest")
    backend = xla_bridge.get_backend(platform)
    module = _stablehlo(pb)
    devices = backend.devices()[:1]
    options = xla_client.CompileOptions()
    compile_fn = getattr(backend, "compile_and_load", None)
    if compile_fn is None:
        return backend.compile(module, options), devices[0]
    try:
        return compile_fn(module, devices, options), devices[0]
    except TypeError:  # wants a DeviceList
        return compile_fn(module, xla_client.DeviceList(tuple(devices)), options), devices[0]


def _stablehlo(pb: bytes):
    try:
        from jax._src.lib import _jax

        return _jax.mlir.hlo_to_stablehlo(pb)
    except (ImportError, AttributeError):
        from jax._src.lib import xla_client

        return xla_client._xla.mlir.hlo_to_stablehlo(pb)


def _ready(arrays) -> None:
    """Wait for every array's device work (no copy to the host)."""
    import jax

    jax.block_until_ready(list(arrays))


class XlaBuffers:
    """The device arrays of one XLA run: those named resident are put once and reused (put
    again only if a run donated them), the others put afresh by every `for_run()`."""

    def __init__(self, args: list[np.ndarray], device, resident: frozenset[int]):
        import jax

        self.args, self.resident = args, resident
        self.put = lambda a: jax.device_put(a, device)
        self.kept = {i: self.put(args[i]) for i in resident}
        _ready(self.kept.values())

    def for_run(self) -> list:
        for i, b in self.kept.items():
            if b.is_deleted():  # donated to an output by the last run
                self.kept[i] = self.put(self.args[i])
        return [self.kept[i] if i in self.resident else self.put(a)
                for i, a in enumerate(self.args)]


def _xla_resident(exe, args: list[np.ndarray], device, n: int) -> list[float]:
    """Seconds of `n` runs with every input on the device before and outputs left there."""
    bufs = XlaBuffers(args, device, frozenset(range(len(args))))
    _ready(exe.execute(bufs.for_run()))  # warm-up
    times = []
    for _ in range(n):
        ready = bufs.for_run()  # only donated inputs are put again, before the clock starts
        _ready(ready)
        start = time.perf_counter()
        _ready(exe.execute(ready))
        times.append(time.perf_counter() - start)
    return times


def run_xla(meta: str, pb: str, o: argparse.Namespace) -> tuple[dict, list]:
    exe, device = _xla_executable(Path(pb).read_bytes(), o.platform)
    args = inputs(meta)
    kept = resident_numbers(o.resident, len(args))
    bufs = XlaBuffers(args, device, kept)

    def once() -> list:
        return [np.asarray(out) for out in exe.execute(bufs.for_run())]

    outputs = once()
    start = time.perf_counter()
    once()
    n = _count(time.perf_counter() - start, o.seconds)
    host = []
    for _ in range(n):
        start = time.perf_counter()
        once()
        host.append(time.perf_counter() - start)
    result = {"host_ms": _ms(host), "runs": n, "resident_params": len(kept)}
    _time_resident(result, lambda: _xla_resident(exe, args, device, n))
    return result, outputs


# ---- main -----------------------------------------------------------------------------------

def _write(outdir: str, side: str, result: dict, outputs: list) -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"{side}.npz", **{f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
    (out / f"{side}.json").write_text(json.dumps(result))


def parse_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("side", choices=["compile", "hloc", "xla"])
    p.add_argument("paths", nargs="+")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--seconds", type=float, default=1.0, help="per timing loop, about")
    p.add_argument("--resident", default="", help="parameters kept on the device host to host")
    p.add_argument("--device", default="cuda", help="hloc's device (cuda-emulated to try it)")
    p.add_argument("--platform", default="gpu", help="XLA's backend (cpu to try it)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    o = parse_args(argv)
    if o.side == "compile":
        return compile_case(o.paths[0], o.paths[1], o.arch)
    runner = run_hloc if o.side == "hloc" else run_xla
    try:
        result, outputs = runner(o.paths[0], o.paths[1], o)
    except Exception as e:  # the row says why; the check goes on
        result, outputs = {"error": f"{type(e).__name__}: {e}"[:300]}, []
    _write(o.paths[2], o.side, result, outputs)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
