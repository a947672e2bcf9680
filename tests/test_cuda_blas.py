"""HLOC_CUDA_GEMM=cublas without a GPU.

Gemm thunks of plain dots carry a column-major BLAS descriptor (hloc.thunks.gpu.BlasCall). On
`cuda-emulated` the descriptor runs through numpy's OpenBLAS with cuBLAS' contract
(hloc.runtime.cuda.host_blas), so its ops, leading dimensions and batch strides are checked
against the reference interpreter (layout cases) and against XLA's outputs (every sample).
The libcublas loader and the cuBLAS argument marshalling are tested with fakes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json

import numpy as np
import pytest

from hloc.errors import InputError
from hloc.frontend import load
from hloc.ir import Opcode, dtypes
from hloc.runtime.cuda import cublas as cuda_blas
from hloc.runtime.cuda import host_blas
from hloc.runtime.cuda.driver import CudaError
from hloc.runtime.cuda.emulated import CudaEmulatedExecutable
from hloc.thunks import gpu as gt
from hloc.thunks.serialize import gpu_program_from_json as program_from_json
from hloc.thunks.serialize import gpu_program_to_json as program_to_json

from .conftest import SAMPLES, sample_arrays
from .support.run import emulate_hlo
from .support.values import assert_close
from .test_cuda_samples import CASES, _bundle, _problems

DOT = """HloModule m

ENTRY e {{
  a = {lhs} parameter(0)
  b = {rhs} parameter(1)
  ROOT d = {out} dot(a, b), {dnums}
}}
"""
MK_KN = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
BATCHED = ("lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
           "rhs_contracting_dims={1}")
# name: (lhs, rhs, out, dimension numbers, (transa, transb, swapped) the layouts call for).
# Compiled with no passes, so the layouts reach the Gemm thunk as written.
LAYOUTS = {
    "row_major": ("f32[32,40]{1,0}", "f32[40,24]{1,0}", "f32[32,24]{1,0}", MK_KN,
                  ("N", "N", True)),
    "lhs_col_major": ("f32[32,40]{0,1}", "f32[40,24]{1,0}", "f32[32,24]{1,0}", MK_KN,
                      ("N", "T", True)),
    "rhs_transposed": ("f32[32,40]{1,0}", "f32[24,40]{1,0}", "f32[32,24]{1,0}",
                       "lhs_contracting_dims={1}, rhs_contracting_dims={1}", ("T", "N", True)),
    "out_col_major": ("f32[32,40]{1,0}", "f32[40,24]{1,0}", "f32[32,24]{0,1}", MK_KN,
                      ("T", "T", False)),
    "all_col_major": ("f32[32,40]{0,1}", "f32[40,24]{0,1}", "f32[32,24]{0,1}", MK_KN,
                      ("N", "N", False)),
    "batched": ("f32[3,32,40]{2,1,0}", "f32[3,40,24]{2,1,0}", "f32[3,32,24]{2,1,0}", BATCHED,
                ("N", "N", True)),
    "batch_in_middle": ("f32[32,3,40]{2,1,0}", "f32[3,40,24]{2,1,0}", "f32[3,32,24]{2,1,0}",
                        "lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, "
                        "rhs_contracting_dims={1}", ("N", "N", True)),
    "batched_out_col_major": ("f32[3,32,40]{2,1,0}", "f32[3,40,24]{2,1,0}",
                              "f32[3,32,24]{1,2,0}", BATCHED, ("T", "T", False)),
    "two_contracting": ("f32[32,4,10]{2,1,0}", "f32[4,10,24]{2,1,0}", "f32[32,24]{1,0}",
                        "lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}",
                        ("N", "N", True)),
    "two_free": ("f32[4,8,40]{2,1,0}", "f32[40,24]{1,0}", "f32[4,8,24]{2,1,0}",
                 "lhs_contracting_dims={2}, rhs_contracting_dims={0}", ("N", "N", True)),
    "f64": ("f64[32,40]{1,0}", "f64[40,24]{1,0}", "f64[32,24]{1,0}", MK_KN, ("N", "N", True)),
    "bf16": ("bf16[32,40]{1,0}", "bf16[40,24]{1,0}", "bf16[32,24]{1,0}", MK_KN,
             ("N", "N", True)),
    "f16_to_f32": ("f16[32,40]{0,1}", "f16[40,24]{1,0}", "f32[32,24]{1,0}", MK_KN,
                   ("N", "T", True)),
}
TOLERANCE = {"f32": (1e-5, 1e-5), "f64": (1e-12, 1e-12), "bf16": (2e-2, 5e-2),
             "f16": (1e-3, 1e-3)}


def _array(text: str, rng) -> np.ndarray:
    dtype, dims = text.split("[")[0], text.split("[")[1].split("]")[0].split(",")
    np_dtype = dtypes.to_numpy(dtypes.from_name(dtype))
    return rng.standard_normal([int(d) for d in dims]).astype(np_dtype)


def _gemms(ex) -> list[gt.GemmLaunch]:
    return [t for t in ex.program.walk() if isinstance(t, gt.GemmLaunch)]


@pytest.mark.cpu
@pytest.mark.parametrize("name", LAYOUTS)
def test_descriptor_layouts_on_host_blas(name, monkeypatch):
    lhs, rhs, out, dnums, ops = LAYOUTS[name]
    monkeypatch.setenv("HLOC_CUDA_GEMM", "cublas")
    rng = np.random.default_rng(7)
    got, want, ex = emulate_hlo(DOT.format(lhs=lhs, rhs=rhs, out=out, dnums=dnums),
                                [_array(lhs, rng), _array(rhs, rng)], passes="")
    (gemm,) = _gemms(ex)
    assert gemm.blas is not None
    assert (gemm.blas.transa, gemm.blas.transb, gemm.blas.swapped) == ops
    assert ex.runner.blas_calls == 1
    rtol, atol = TOLERANCE[out.split("[")[0]]
    assert_close(got, want, rtol=rtol, atol=atol)


@pytest.mark.cpu
def test_default_pipeline_keeps_descriptors_and_kernel_by_default(monkeypatch):
    lhs, rhs, out, dnums, _ = LAYOUTS["batched"]
    text = DOT.format(lhs=lhs, rhs=rhs, out=out, dnums=dnums)
    rng = np.random.default_rng(3)
    inputs = [_array(lhs, rng), _array(rhs, rng)]
    monkeypatch.delenv("HLOC_CUDA_GEMM", raising=False)
    got, want, ex = emulate_hlo(text, inputs)
    assert [g.blas is not None for g in _gemms(ex)] == [True]
    assert ex.runner.blas_calls == 0  # the kernel unless asked for
    assert_close(got, want, atol=1e-5)
    monkeypatch.setenv("HLOC_CUDA_GEMM", "cublas")
    got, _, ex = emulate_hlo(text, inputs)
    assert ex.runner.blas_calls == 1
    assert_close(got, want, atol=1e-5)


EPILOGUE = """HloModule m

ENTRY e {
  a = f32[32,40] parameter(0)
  b = f32[40,24] parameter(1)
  bias = f32[24] parameter(2)
  d = f32[32,24] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[32,24] broadcast(bias), dimensions={1}
  s = f32[32,24] add(d, bb)
  zero = f32[] constant(0)
  z = f32[32,24] broadcast(zero), dimensions={}
  ROOT r = OUT maximum(s, z)
}
"""


@pytest.mark.cpu
@pytest.mark.parametrize("gemm", ["cublas", "kernel"])
def test_fused_epilogue_runs_after_a_described_gemm(gemm, monkeypatch):
    """dot + bias + relu: the dot alone writes the output (cuBLAS, or the kernel without its
    epilogue), then the epilogue kernel rewrites it in place."""
    monkeypatch.setenv("HLOC_CUDA_GEMM", gemm)
    rng = np.random.default_rng(5)
    inputs = [_array(s, rng) for s in ("f32[32,40]", "f32[40,24]", "f32[24]")]
    got, want, ex = emulate_hlo(EPILOGUE.replace("OUT", "f32[32,24]"), inputs)
    (gemm_thunk,) = _gemms(ex)
    assert gemm_thunk.blas is not None
    assert {r.variant: dict(r.params) for r in ex.program.kernels} == {
        "gemm.tiled": {"core_only": 1}, "loop": {"unroll": 1, "core_from_output": 1}}
    assert ex.runner.blas_calls == (1 if gemm == "cublas" else 0)
    assert_close(got, want, atol=1e-5)


@pytest.mark.cpu
def test_an_epilogue_changing_the_type_stays_fused(monkeypatch):
    monkeypatch.setenv("HLOC_CUDA_GEMM", "cublas")
    text = EPILOGUE.replace("ROOT r = OUT maximum(s, z)",
                            "m = f32[32,24] maximum(s, z)\n  ROOT r = f16[32,24] convert(m)")
    rng = np.random.default_rng(6)
    inputs = [_array(s, rng) for s in ("f32[32,40]", "f32[40,24]", "f32[24]")]
    got, want, ex = emulate_hlo(text, inputs)
    gemms = _gemms(ex)
    assert gemms and all(g.blas is None for g in gemms)
    assert ex.runner.blas_calls == 0
    assert_close(got, want, atol=1e-2)


@pytest.mark.cpu
def test_descriptor_json_round_trip_and_old_form(monkeypatch):
    lhs, rhs, out, dnums, _ = LAYOUTS["batch_in_middle"]
    monkeypatch.delenv("HLOC_CUDA_GEMM", raising=False)
    rng = np.random.default_rng(1)
    _, _, ex = emulate_hlo(DOT.format(lhs=lhs, rhs=rhs, out=out, dnums=dnums),
                           [_array(lhs, rng), _array(rhs, rng)], passes="")
    back, _ = program_from_json(program_to_json(ex.program))
    assert back == ex.program
    old = json.loads(program_to_json(ex.program))
    for thunk in old["main"]:
        thunk.pop("blas", None)  # bundles written before descriptors existed
    assert all(g.blas is None for g in _gemms_of(program_from_json(json.dumps(old))[0]))


def _gemms_of(program) -> list[gt.GemmLaunch]:
    return [t for t in program.walk() if isinstance(t, gt.GemmLaunch)]


@pytest.mark.cpu
def test_descriptor_outside_its_slice_is_refused(monkeypatch):
    lhs, rhs, out, dnums, _ = LAYOUTS["row_major"]
    monkeypatch.setenv("HLOC_CUDA_GEMM", "cublas")
    rng = np.random.default_rng(2)
    inputs = [_array(lhs, rng), _array(rhs, rng)]
    _, _, ex = emulate_hlo(DOT.format(lhs=lhs, rhs=rhs, out=out, dnums=dnums), inputs,
                           passes="")
    call = _gemms(ex)[0].blas
    for bad in (dict(ldc=call.ldc + 1), dict(batch=2, stride_c=call.m * call.n),
                dict(lda=call.m - 1),
                dict(transa="C"), dict(a_type="s32")):
        with pytest.raises(InputError, match="BLAS descriptor"):
            ex.runner.blas(dataclasses.replace(call, **bad), "d")


def test_gemm_env_values(monkeypatch):
    assert cuda_blas.use_cublas({}) is False
    assert cuda_blas.use_cublas({"HLOC_CUDA_GEMM": "kernel"}) is False
    assert cuda_blas.use_cublas({"HLOC_CUDA_GEMM": "cuBLAS"}) is True
    with pytest.raises(InputError, match="HLOC_CUDA_GEMM"):
        cuda_blas.use_cublas({"HLOC_CUDA_GEMM": "cutlass"})
    monkeypatch.setenv("HLOC_CUDA_GEMM", "bogus")
    with pytest.raises(InputError):
        cuda_blas.use_cublas()


# ---- finding libcublas --------------------------------------------------------------------------

class _FakeCublas:
    def cublasGemmStridedBatchedEx(self, *args):
        return 0


def _loader(accept: set[str], tried: list[str]):
    def load(path):
        tried.append(path)
        if path not in accept:
            raise OSError(f"{path}: cannot open shared object file")
        return _FakeCublas()
    return load


def _touch(path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not really a library")
    return str(path)


def test_cublas_from_the_wheel_first(tmp_path):
    wheel = _touch(tmp_path / "site" / "nvidia" / "cublas" / "lib" / "libcublas.so.12")
    home = _touch(tmp_path / "cuda" / "lib64" / "libcublas.so.12")
    tried: list[str] = []
    lib = cuda_blas.load_cublas({"CUDA_HOME": str(tmp_path / "cuda")},
                                _loader({wheel, home}, tried),
                                lambda: [str(tmp_path / "site" / "nvidia")])
    assert isinstance(lib, _FakeCublas) and tried == [wheel]


def test_cublas_from_cuda_home_then_system(tmp_path):
    home = _touch(tmp_path / "cuda" / "targets" / "x86_64-linux" / "lib" / "libcublas.so.12")
    tried: list[str] = []
    cuda_blas.load_cublas({"CUDA_HOME": str(tmp_path / "cuda")}, _loader({home}, tried),
                          lambda: [])
    assert tried == [home]
    tried.clear()
    cuda_blas.load_cublas({}, _loader({"libcublas.so.12"}, tried), lambda: [])
    assert tried[-1] == "libcublas.so.12" and not any("/" in t for t in tried[:-1])


def test_cublas_not_found_is_one_clear_line(tmp_path):
    tried: list[str] = []
    with pytest.raises(CudaError) as info:
        cuda_blas.load_cublas({}, _loader(set(), tried), lambda: [])
    message = str(info.value)
    assert "\n" not in message and "HLOC_CUDA_GEMM=cublas" in message
    assert "libcublas was not found" in message and "nvidia-cublas" in message
    assert "libcublas.so.12" in tried


def test_unloadable_cublas_is_named(tmp_path):
    junk = _touch(tmp_path / "cuda" / "lib64" / "libcublas.so.12")

    def load(path):  # the real loader for files; no system library, whatever this host has
        if "/" not in path:
            raise OSError(path)
        return ctypes.CDLL(path)

    with pytest.raises(CudaError) as info:
        cuda_blas.load_cublas({"CUDA_HOME": str(tmp_path / "cuda")}, load, lambda: [])
    assert junk in str(info.value) and "\n" not in str(info.value)


# ---- the cuBLAS call, against a fake libcublas that computes on the host ------------------------

_VP, _INT, _LL = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
# The C prototypes of cublas_api.h: the fake is called through real ctypes marshalling.
_CREATE = ctypes.CFUNCTYPE(_INT, _VP)
_SET_STREAM = ctypes.CFUNCTYPE(_INT, _VP, _VP)
_GEMM = ctypes.CFUNCTYPE(_INT, _VP, _INT, _INT, _INT, _INT, _INT, _VP, _VP, _INT, _INT, _LL,
                         _VP, _INT, _INT, _LL, _VP, _VP, _INT, _INT, _LL, _INT, _INT, _INT)


class _HostCublas:
    """libcublas' three entry points hloc uses, as C function pointers whose bodies compute
    with numpy's OpenBLAS (f32 only) from the arguments exactly as C receives them."""

    HANDLE = 0x5EED

    def __init__(self):
        self.streams: list[int] = []
        self.calls = 0
        self.cublasCreate_v2 = _CREATE(self._create)
        self.cublasSetStream_v2 = _SET_STREAM(self._set_stream)
        self.cublasGemmStridedBatchedEx = _GEMM(self._gemm)

    def _create(self, handle_ptr):
        _VP.from_address(handle_ptr).value = self.HANDLE
        return 0

    def _set_stream(self, handle, stream):
        assert handle == self.HANDLE
        self.streams.append(stream or 0)
        return 0

    def _gemm(self, handle, ta, tb, m, n, k, alpha, a, atype, lda, sa, b, btype, ldb, sb, beta,
              c, ctype, ldc, sc, batch, compute, algo):
        assert handle == self.HANDLE
        assert (atype, btype, ctype, compute, algo) == (0, 0, 0, 68, -1)  # R_32F, COMPUTE_32F
        fn, int_t = host_blas.routine("f32")
        op, r = {0: b"N", 1: b"T"}, ctypes.byref
        scalars = [ctypes.c_float.from_address(p) for p in (alpha, beta)]
        for i in range(batch):
            fn(r(ctypes.c_char(op[ta])), r(ctypes.c_char(op[tb])), r(int_t(m)), r(int_t(n)),
               r(int_t(k)), r(scalars[0]), _VP(a + 4 * i * sa), r(int_t(lda)),
               _VP(b + 4 * i * sb), r(int_t(ldb)), r(scalars[1]), _VP(c + 4 * i * sc),
               r(int_t(ldc)))
        self.calls += 1
        return 0


class _StreamedMemory:
    """Emulated device memory that also reports a current stream, as CudaDevice does."""

    def __init__(self, memory):
        self.memory = memory

    def address(self, s):
        return self.memory.address(s)

    def stream_handle(self) -> int:
        return 1000 + self.memory.stream


@pytest.mark.cpu
@pytest.mark.parametrize("name", ["rhs_transposed", "batched_out_col_major"])
def test_cublas_arguments_through_a_host_cublas(name, monkeypatch):
    lhs, rhs, out, dnums, _ = LAYOUTS[name]
    monkeypatch.delenv("HLOC_CUDA_GEMM", raising=False)
    rng = np.random.default_rng(11)
    inputs = [_array(lhs, rng), _array(rhs, rng)]
    _, want, ex = emulate_hlo(DOT.format(lhs=lhs, rhs=rhs, out=out, dnums=dnums), inputs,
                              passes="")
    fake = _HostCublas()
    ex.runner.blas = cuda_blas.CublasGemm(_StreamedMemory(ex.memory), lib=fake)
    got = ex.run(inputs)
    assert fake.calls == 1 and ex.runner.blas_calls == 1
    assert fake.streams == [1000]  # bound once, to the schedule's stream
    assert_close(got, want, atol=1e-5)


# ---- every sample ---------------------------------------------------------------------------------

# Samples whose GPU schedule has plain dots big enough for the GEMM kernel: the BLAS path
# must run for them.
PLAIN_DOTS = {("attention", ".pb"), ("attention", ".opt.pb"), ("attention_grad", ".pb"),
              ("attention_grad", ".opt.pb"), ("embedding_grad", ".pb"),
              ("embedding_grad", ".opt.pb"), ("mlp", ".opt.pb")}


# `make test` runs the samples whose BLAS path runs (attention_grad's twice-9 s emulation
# aside); `make test-all` runs every sample, where the BLAS switch must change nothing.
_BLAS_PARAMS = [pytest.param(n, s, id=f"{n}{s}", marks=[] if (n, s) in PLAIN_DOTS
                             and n != "attention_grad" else [pytest.mark.slow])
                for n, s in CASES]


@pytest.mark.cpu
@pytest.mark.parametrize("name,suffix", _BLAS_PARAMS)
def test_sample_with_host_blas(name, suffix, tmp_path, monkeypatch):
    monkeypatch.setenv("HLOC_CUDA_GEMM", "cublas")
    module = load(SAMPLES / f"{name}{suffix}").module
    if not any(i.opcode == Opcode.DOT for c in module.computations for i in c.instructions):
        assert (name, suffix) not in PLAIN_DOTS
        return  # no dot, no descriptor: the run is test_cuda_samples' emulated run
    bundle = _bundle(name, tmp_path, ("sm_80",), suffix)
    program, _ = program_from_json(bytes(bundle.members["gpu_thunks.json"]))
    described = [g for g in _gemms_of(program) if g.blas is not None]
    if (name, suffix) in PLAIN_DOTS:
        assert described, "expected cuBLAS-eligible Gemm thunks"
    if not described:
        return  # nothing runs differently from test_cuda_samples' emulated run
    ex = CudaEmulatedExecutable(bundle)
    outputs = ex.run(sample_arrays(name, "inputs"))
    if (name, suffix) in PLAIN_DOTS:
        assert ex.runner.blas_calls > 0
    problems = _problems(name, outputs)
    assert not problems, "; ".join(problems)
