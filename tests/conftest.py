"""Shared test fixtures: the sample corpus and helpers to build small modules."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
IN_CI = os.environ.get("CI", "").lower() == "true"

# Compiles allocate millions of short-lived objects in cycles (the IR's use lists, llvmlite's
# IR): at Python's default thresholds a worker spent about 15 % of its time in the cyclic
# collector (gc.callbacks, test_cpu_samples + test_codegen_samples + test_pass_samples +
# test_cuda_samples: 23-28 s of ~180 s per worker); collecting young objects every 50,000
# allocations instead of every 700 halves that, for ~20 % more peak memory. (`hloc compile`
# runs without the collector: cli/main.py without_gc.)
gc.set_threshold(50_000, 20, 100)

# A compile server the developer runs (hloc server start) serves no test: commands run in
# their own processes. tests/test_server.py starts servers of its own.
os.environ["HLOC_SERVER"] = "off"

# The suite's compiles and GEMM objects go to a private cache of its own, never the user's.
if "HLOC_CACHE_DIR" not in os.environ:
    import tempfile

    os.environ["HLOC_CACHE_DIR"] = tempfile.mkdtemp(prefix="hloc-test-cache-")


def sample_names(sub: str = "") -> list[str]:
    """Sample base names that have a .pb (e.g. 'mlp', 'ops/divide_s32_edges')."""
    base = SAMPLES / sub if sub else SAMPLES
    if not base.is_dir():
        return []
    prefix = f"{sub}/" if sub else ""
    return sorted(prefix + p.name[: -len(".pb")] for p in base.glob("*.pb") if not p.name.endswith(".opt.pb"))


def require_samples() -> None:
    if not sample_names():
        if IN_CI:
            pytest.fail("samples/ is empty: the sample corpus must be committed")
        pytest.skip("no samples generated")


def sample_meta(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.json").read_text())


def sample_arrays(name: str, kind: str) -> list[np.ndarray]:
    """Inputs ('inputs') or expected outputs ('expected') with bit patterns restored to their dtype."""
    from hloc.ir import dtypes

    meta = sample_meta(name)
    entries = meta["params"] if kind == "inputs" else meta["outputs"]
    prefix = "arg" if kind == "inputs" else "out"
    with np.load(SAMPLES / f"{name}.{kind}.npz") as z:
        arrays = [z[f"{prefix}{i}"] for i in range(len(entries))]
    out = []
    for arr, e in zip(arrays, entries, strict=True):
        dt = dtypes.to_numpy(dtypes.from_name(e["dtype"]))
        if arr.dtype != dt:
            arr = arr.view(dt) if arr.dtype.itemsize == dt.itemsize else arr.astype(dt)
        out.append(arr.reshape(e["shape"]))
    return out


@pytest.fixture(autouse=True)
def _reseeded_module_rngs(request):
    """Every test module's `RNG` generator restarts from a seed of the test's own id, so a test
    draws the same values whichever tests ran before it on its worker (xdist spreads them
    differently from run to run): a tolerance that held once holds every time."""
    import sys
    import zlib

    seed = zlib.crc32(request.node.nodeid.encode())
    for name, module in list(sys.modules.items()):
        if name.startswith("tests.") and isinstance(getattr(module, "RNG", None), np.random.Generator):
            module.RNG.bit_generator.state = np.random.default_rng(seed).bit_generator.state


@pytest.fixture
def tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(params=["native", "runtime"])
def conv_path(request, monkeypatch):
    """Run CPU convolution thunks natively (small ones get a kernel) or on the runtime's host
    path (the native kind unregistered for the test)."""
    if request.param == "runtime":
        from hloc.codegen.cpu import thunk_kernels

        thunk_kernels.NATIVE_KINDS.load()
        monkeypatch.delitem(thunk_kernels.NATIVE_KINDS._entries, "convolution")
    return request.param
