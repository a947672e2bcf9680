"""XLA CPU side of bench_cpu.py; runs in the jax venv (never imported by hloc).

Reads jobs from stdin, one JSON object per line: {"name", "pb", "inputs" (npz, keys
arg0..), "dtypes" (XLA dtype names of the parameters), "outputs" (npz path to write),
"seconds"}. For each it converts the HloModuleProto to StableHLO, compiles it with XLA:CPU
(timed), runs it on the inputs (device buffers prepared once; each run waits for its results)
and answers with one JSON line {"name", "compile_s", "temp_bytes", "times": [...]} — or {"name", "error"}.
One job at a time lets the caller time hloc and XLA back to back on a shared machine; a
repeated name reuses the compiled executable (only the first answer's compile_s is a compile).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

_STORED = {"bf16": "bfloat16", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
           "f8e4m3": "float8_e4m3", "f8e3m4": "float8_e3m4", "f8e4m3fnuz": "float8_e4m3fnuz",
           "f8e5m2fnuz": "float8_e5m2fnuz", "f8e4m3b11fnuz": "float8_e4m3b11fnuz",
           "s4": "int4", "u4": "uint4", "s2": "int2", "u2": "uint2"}


def _decode(arr: np.ndarray, dtype: str) -> np.ndarray:
    import ml_dtypes

    name = _STORED.get(dtype)
    if name is None:
        return arr
    target = np.dtype(getattr(ml_dtypes, name))
    if target.itemsize == arr.dtype.itemsize and dtype not in ("s4", "s2"):
        return arr.view(target)
    if dtype in ("s4", "s2"):
        bits = 4 if dtype == "s4" else 2
        v = arr.astype(np.int16) & ((1 << bits) - 1)
        v = np.where(v >= (1 << (bits - 1)), v - (1 << bits), v)
        return v.astype(target)
    return arr.astype(target)


_CACHE: dict[str, tuple] = {}
COMPILES = 3  # keep equal to bench_cpu.COMPILES


def _prepare(job: dict, backend, xla_client, mlir) -> tuple:
    """Compile the job's module (timed) and put its inputs on the device, once per name."""

    if job["name"] in _CACHE:
        return _CACHE[job["name"]]
    pb = open(job["pb"], "rb").read()
    compile_s = float("inf")
    for _ in range(COMPILES):  # the fastest of a few compiles: steadier on a busy machine
        start = time.perf_counter()
        module = mlir.hlo_to_stablehlo(pb)
        exe = backend.compile_and_load(module, backend.devices()[:1], xla_client.CompileOptions())
        compile_s = min(compile_s, time.perf_counter() - start)
    with np.load(job["inputs"]) as z:
        args = [_decode(z[f"arg{i}"], d) for i, d in enumerate(job["dtypes"])]
    _CACHE[job["name"]] = (exe, args, compile_s, _temp_bytes(exe))
    return _CACHE[job["name"]]


def _temp_bytes(exe) -> int:
    """XLA's temp allocation (its buffer assignment), or -1 where the client cannot say."""
    try:
        return int(exe.get_compiled_memory_stats().temp_size_in_bytes)
    except Exception:  # older clients: no memory statistics
        return -1


def _storable(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays (bf16, f8, int4) as their bit patterns: npz cannot name those dtypes."""
    a = np.asarray(a)
    if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
        return a.view(f"u{a.dtype.itemsize}")
    return a


def _run_job(job: dict, backend, xla_client, mlir) -> dict:
    import jax

    exe, args, compile_s, temp = _prepare(job, backend, xla_client, mlir)
    bufs = [jax.device_put(a) for a in args]

    def once():
        nonlocal bufs
        if any(b.is_deleted() for b in bufs):  # donated by the previous run: new inputs
            bufs = [jax.device_put(a) for a in args]
            for b in bufs:
                b.block_until_ready()
        t = time.perf_counter()
        outs = exe.execute(bufs)
        for o in outs:
            o.block_until_ready()
        return outs, time.perf_counter() - t

    outs, _ = once()
    if job.get("outputs"):
        np.savez(job["outputs"], **{f"out{i}": _storable(o) for i, o in enumerate(outs)})
    times, budget = [], float(job.get("seconds", 1.0))
    begin = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - begin < budget and len(times) < 1000):
        times.append(once()[1])
    return {"name": job["name"], "compile_s": compile_s, "temp_bytes": temp, "times": times}


def main() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)  # keep s64/f64 parameters as given
    from jax._src import xla_bridge
    from jax._src.lib import _jax, xla_client

    backend = xla_bridge.get_backend("cpu")
    # jax fills in the LAPACK routines its linalg custom calls use when it lowers such an op
    # itself; modules compiled straight from a proto (samples/linalg) would otherwise call a
    # null routine (the worker died with SIGSEGV there).
    try:
        from jax._src.lax import linalg as lax_linalg

        lax_linalg.initialize_lapack()
    except (ImportError, AttributeError):
        pass
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            result = _run_job(job, backend, xla_client, _jax.mlir)
        except Exception as e:  # report and go on with the next module
            result = {"name": job["name"], "error": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
