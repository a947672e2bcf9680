"""On a real GPU (marked `gpu`; skipped without cuda-bindings and a device): pinned staging,
async copies on the copy stream, device-resident parameters, cuBLAS as the default GEMM and
the benchmark figures, each checked against XLA's outputs for a few samples."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import SAMPLES, sample_arrays, sample_names
from .test_cli import hlo_run
from .test_cuda_samples import _bundle, _cuda_device_available, _problems

NAMES = [n for n in ("mlp", "attention", "cnn") if n in sample_names()]

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_gpu():
    if not _cuda_device_available():
        pytest.skip("needs cuda-bindings and an NVIDIA GPU")


def _exe(name, tmp_path, monkeypatch, gemm: str = ""):
    from hloc.runtime.cuda.driver import CudaExecutable

    monkeypatch.setenv("HLOC_CUDA_GEMM", gemm)
    return CudaExecutable(_bundle(name, tmp_path, archs=("sm_80", "sm_90")))


@pytest.mark.parametrize("name", NAMES)
def test_pinned_staging_and_resident_params(name, tmp_path, monkeypatch):
    exe = _exe(name, tmp_path, monkeypatch)
    staging = exe.memory.staging
    assert staging.up.address and staging.down.address  # cuMemHostAlloc'd once
    args = sample_arrays(name, "inputs")
    plain = exe.run(args)
    assert not _problems(name, plain)
    kept = exe.set_resident(range(len(args)))
    assert kept == set(range(len(args)))
    first, second = exe.run(args), exe.run(args)
    for a, b, c in zip(plain, first, second, strict=True):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    # A changed weight: in place plus update(), then a new object: both re-uploaded.
    big = max(range(len(args)), key=lambda i: args[i].size)
    args[big] = args[big].copy()
    args[big][...] = 0
    exe.update(big, args[big])
    zeroed = exe.run(args)
    fresh = list(args)
    fresh[big] = sample_arrays(name, "inputs")[big]
    again = exe.run(fresh)
    for a, b in zip(plain, again, strict=True):
        assert a.tobytes() == b.tobytes()
    assert any(z.tobytes() != p.tobytes() for z, p in zip(zeroed, plain, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_cublas_default_and_kernel_fallback_match_xla(name, tmp_path, monkeypatch):
    from hloc.runtime.cuda.cublas import load_cublas

    try:
        load_cublas()
        have_cublas = True
    except Exception:
        have_cublas = False
    args = sample_arrays(name, "inputs")
    exe = _exe(name, tmp_path, monkeypatch)
    outputs = exe.run(args)
    assert not _problems(name, outputs), _problems(name, outputs)
    if have_cublas and exe.runner.blas is not None:
        assert exe.runner.blas_calls > 0
    kernel = _exe(name, tmp_path, monkeypatch, gemm="kernel")
    assert kernel.runner.blas is None
    assert not _problems(name, kernel.run(args))


@pytest.mark.parametrize("name", NAMES[:1])
def test_profile_rows_and_device_resident_timing(name, tmp_path, monkeypatch):
    exe = _exe(name, tmp_path, monkeypatch)
    args = sample_arrays(name, "inputs")
    _, rows = exe.run_profiled(args)
    copies = {r.name: r for r in rows if r.kind.startswith("copy-")}
    assert copies["(uploads)"].bytes > 0 and copies["(downloads)"].bytes > 0
    times = exe.time_device_resident(args, 5)
    assert len(times) == 5 and min(times) > 0
    assert not _problems(name, exe.run(args))


def test_cli_benchmark_on_cuda(tmp_path):
    if "mlp" not in NAMES:
        pytest.skip("no mlp sample")
    bundle = tmp_path / "mlp.bundle"
    from hloc.frontend import load

    from .support.bundles import compile_bundle

    compile_bundle(load(SAMPLES / "mlp.pb").module, bundle, target="cuda",
                   cuda_archs=("sm_80", "sm_90"))
    report = tmp_path / "r.json"
    r = hlo_run(bundle, "--device", "cuda", "--inputs", SAMPLES / "mlp.inputs.npz",
                "--expected", SAMPLES / "mlp.expected.npz", "--resident", "all-but-last:1",
                "--benchmark", "5", "--report", report, "--profile")
    assert r.exit_code == 0, r.output
    bench = json.loads(report.read_text())["benchmark"]
    assert bench["device_resident"]["median_s"] > 0 and bench["host_to_host"]["median_s"] > 0
    assert "copy-h2d" in r.output and "GB/s" in r.output
    assert np.isfinite(bench["device_resident"]["median_s"])
