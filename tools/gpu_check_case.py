"""One side of one gpu_check benchmark case, run in its own process (a hang or crash costs
that case only; tools/gpu_check.py gives each a timeout).

    python3 tools/gpu_check_case.py compile CASE.pb BUNDLE --arch sm_90
    python3 tools/gpu_check_case.py hloc   CASE.json BUNDLE  OUTDIR [--seconds S]
    python3 tools/gpu_check_case.py xla    CASE.json CASE.pb OUTDIR [--seconds S]

`compile` runs `hloc compile --target cuda`. `hloc` runs the bundle on the GPU through the
runtime hlo-run uses, timed by hlo-run's benchmark loop (host arrays in, host arrays out).
`xla` compiles the same HloModuleProto with jax's XLA GPU and times the same round trip
(device_put of the inputs, execute, outputs copied back). Both use benchmarks/cases.py's
inputs and write OUTDIR/SIDE.json ({"median_ms", "runs"} or {"error"}) and OUTDIR/SIDE.npz.
TF32 is off on both sides (NVIDIA_TF32_OVERRIDE=0, jax_default_matmul_precision=highest).
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
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
# XLA's Triton GEMMs use TF32 for DEFAULT-precision f32 dots whatever NVIDIA_TF32_OVERRIDE says
# (scan_rnn_200 on an H200: 0.085 max error against f32 with them, 1.4e-4 without); cuBLAS
# honours the override, so XLA runs its dots through cuBLAS here: full f32 on both sides.
os.environ.setdefault("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def _inputs(meta_path: str) -> list[np.ndarray]:
    from cases import case_inputs

    return case_inputs(json.loads(Path(meta_path).read_text())["params"])


def _count(once_s: float, seconds: float) -> int:
    """Timed runs for about `seconds` (at least 3, at most 100)."""
    return max(3, min(100, int(seconds / max(once_s, 1e-6))))


def compile_case(pb: str, bundle: str, arch: str) -> int:
    Path(bundle).parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "hloc.cli.main", "compile", pb, "-o", bundle,
           "--target", "cuda", "--cuda-arch", arch]
    return subprocess.call(cmd, cwd=ROOT)


def run_hloc(meta: str, bundle: str, seconds: float) -> tuple[dict, list]:
    from hloc.cli.run import _benchmark
    from hloc.runtime import load

    exe = load(bundle, "cuda")
    args = _inputs(meta)
    start = time.perf_counter()
    outputs = exe.run(args)
    bench = _benchmark(exe, args, _count(time.perf_counter() - start, seconds))
    return {"median_ms": bench["median_s"] * 1e3, "runs": bench["n"]}, outputs


def _xla_executable(pb: bytes):
    """XLA GPU's executable for an HloModuleProto (the calls xla_worker.py makes, with the
    spellings newer jaxlibs use as fallbacks) and its device."""
    import jax
    from jax._src import xla_bridge
    from jax._src.lib import xla_client

    jax.config.update("jax_default_matmul_precision", "highest")
    backend = xla_bridge.get_backend("gpu")
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


def run_xla(meta: str, pb: str, seconds: float) -> tuple[dict, list]:
    import jax

    exe, device = _xla_executable(Path(pb).read_bytes())
    args = _inputs(meta)

    def once() -> list:
        bufs = [jax.device_put(a, device) for a in args]
        outs = exe.execute(bufs)
        return [np.asarray(o) for o in outs]

    start = time.perf_counter()
    outputs = once()
    times = []
    for _ in range(_count(time.perf_counter() - start, seconds)):
        t = time.perf_counter()
        once()
        times.append(time.perf_counter() - t)
    return {"median_ms": statistics.median(times) * 1e3, "runs": len(times)}, outputs


def _write(outdir: str, side: str, result: dict, outputs: list) -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / f"{side}.npz", **{f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
    (out / f"{side}.json").write_text(json.dumps(result))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("side", choices=["compile", "hloc", "xla"])
    p.add_argument("paths", nargs="+")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--seconds", type=float, default=1.0)
    a = p.parse_args(argv)
    if a.side == "compile":
        return compile_case(a.paths[0], a.paths[1], a.arch)
    runner = run_hloc if a.side == "hloc" else run_xla
    try:
        result, outputs = runner(a.paths[0], a.paths[1], a.seconds)
    except Exception as e:  # the row says why; the check goes on
        result, outputs = {"error": f"{type(e).__name__}: {e}"[:300]}, []
    _write(a.paths[2], a.side, result, outputs)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
