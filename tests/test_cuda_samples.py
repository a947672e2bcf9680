"""Every sample through the CUDA back end: compiled for sm_90 and, in `make test-all`, sm_80
too (ptxas must accept every kernel where ptxas exists), run on the emulator against XLA's
outputs, and — marked `gpu` — on a real device when one is present."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hloc.bundle import read_bundle
from hloc.codegen.cuda import ptxas
from hloc.runtime.cuda.emulated import CudaEmulatedExecutable

from .conftest import SAMPLES, sample_arrays, sample_meta, sample_names
from .support.bundles import sample_bundle
from .test_interp_samples import mismatch

NAMES = sample_names() + sample_names("ops")
# Both forms of every sample: what JAX lowers (.pb) and XLA's optimized module (.opt.pb).
CASES = [(n, sfx) for n in NAMES for sfx in (".pb", ".opt.pb") if (SAMPLES / f"{n}{sfx}").exists()]
# Known differences of the shared elemental emitter, which the CPU back end has too (none at
# present: sin/cos/tan of huge arguments and the NaN bits of minimum/maximum/clamp are fixed).
APPROX_LIMITS: set[str] = set()
# The emulator steps every GPU thread on the host: these are the slowest samples by far
# (pytest --durations on two loaded cores: attention_grad 92 s and 71 s, grads 67 s and 39 s,
# then embedding_grad 40 s; 8-10 s each for attention_grad on an idle machine). `make test-all`
# runs them; `make test` still runs every other sample on the emulator.
# XLA's optimized form (.opt.pb) of every sample runs on the emulator in `make test-all`; `make
# test` keeps the lowered form (.pb) of every sample there, and the CPU tests keep both forms.
SLOW = {"attention_grad", "grads", "random"}
PARAMS = [pytest.param(n, s, id=f"{n}{s}",
                       marks=[pytest.mark.slow] if n in SLOW or s == ".opt.pb" else [])
          for n, s in CASES]


def _bundle(name: str, tmp_path, archs=("sm_80", "sm_90"), suffix=".pb"):
    """The sample's CUDA bundle through the suite's compile cache: the emulated run here,
    the cuBLAS, cuDNN and graph tests compile it once between them."""
    path = tmp_path / "m.bundle"
    sample_bundle(SAMPLES / f"{name}{suffix}", path, target="cuda", cuda_archs=tuple(archs))
    return read_bundle(str(path))


def _problems(name: str, outputs) -> list[str]:
    expected = sample_arrays(name, "expected")
    assert len(outputs) == len(expected)
    return [f"out{i}: {why}" for i, (g, e, d) in enumerate(zip(outputs, expected,
                                                               sample_meta(name)["outputs"],
                                                               strict=True))
            if (why := mismatch(np.asarray(g), e, d)) is not None]


def _assert_assembled(bundle, archs) -> None:
    members = set(bundle.members)
    for arch in archs:
        assert f"kernels.{arch}.ptx" in members
        if ptxas.find_ptxas():
            assert f"kernels.{arch}.cubin" in members


@pytest.mark.cpu
@pytest.mark.parametrize("name,suffix", PARAMS)
def test_sample_emulated(name, suffix, tmp_path):
    archs = ("sm_80",)  # the default: the bundle the cuBLAS, cuDNN and graph tests share
    bundle = _bundle(name, tmp_path, archs, suffix)
    _assert_assembled(bundle, archs)
    ex = CudaEmulatedExecutable(bundle)
    outputs = ex.run(sample_arrays(name, "inputs"))
    # Through CUDA graphs (the default), and no capture was refused on the way.
    assert ex.runner.graphs_on
    problems = _problems(name, outputs)
    if problems and name in APPROX_LIMITS:
        pytest.xfail("; ".join(problems))
    assert not problems, "; ".join(problems)


# `make test` compiles each sample for one architecture, sm_80 (the default, through the
# compile cache the cuBLAS, cuDNN and graph tests share): NVPTX and ptxas per architecture
# were a fifth of an emulated sample's time, and the emulator runs neither. Bundles for several
# architectures are test_schedule_records_kernel_resources (mlp, sm_80 and sm_90, resources
# from ptxas for both) and test_cuda_emulator_rules; `make test-all` assembles every lowered
# sample for sm_90 as well.
@pytest.mark.cpu
@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, s in CASES if s == ".pb"])
def test_sample_assembles_for_sm_90(name, tmp_path):
    _assert_assembled(_bundle(name, tmp_path, ("sm_90",)), ("sm_90",))


@pytest.mark.cpu
def test_schedule_records_kernel_resources(tmp_path):
    if not NAMES:
        pytest.skip("no samples generated")
    bundle = _bundle("mlp" if "mlp" in NAMES else NAMES[0], tmp_path)
    data = json.loads(bytes(bundle.members["gpu_thunks.json"]))
    if ptxas.find_ptxas():
        for arch in ("sm_80", "sm_90"):
            kernels = data["resources"][arch]
            assert set(kernels) == {k["name"] for k in data["kernels"]}
            assert all(r["registers"] > 0 for r in kernels.values())
    text = bytes(bundle.members["gpu_thunks.txt"]).decode()
    assert "grid=" in text and "block=" in text


def _cuda_device_available() -> bool:
    try:
        from cuda.bindings import driver
    except ImportError:
        return False
    try:
        err, = driver.cuInit(0)
        return err == driver.CUresult.CUDA_SUCCESS and driver.cuDeviceGetCount()[1] > 0
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_sample_on_gpu(name, tmp_path):
    if not _cuda_device_available():
        pytest.skip("needs cuda-bindings and an NVIDIA GPU")
    from hloc.runtime.cuda.driver import CudaExecutable

    bundle = _bundle(name, tmp_path, archs=("sm_80", "sm_90"))
    ex = CudaExecutable(bundle)
    outputs = ex.run(sample_arrays(name, "inputs"))
    assert ex.runner.graphs_on  # captured and launched as CUDA graphs, none refused
    problems = _problems(name, outputs)
    if problems and name in APPROX_LIMITS:
        pytest.xfail("; ".join(problems))
    assert not problems, "; ".join(problems)
