"""`--device cuda` without a GPU: the pinned staging and copy-stream ordering against a fake
cuda-bindings driver (device memory is host memory, calls are logged in order), and the
cuBLAS default selection and compute types with fake loaders."""

from __future__ import annotations

import ctypes
import enum
from types import SimpleNamespace

import numpy as np
import pytest

from hloc.bundle import read_bundle
from hloc.errors import InputError
from hloc.ir import Shape
from hloc.ir.attrs import PrecisionConfig
from hloc.ir.text.parser import parse_module
from hloc.runtime.cuda import cublas as cuda_blas
from hloc.runtime.cuda.driver import CudaDevice, CudaError
from hloc.runtime.cuda.transfers import read_array, write_array
from hloc.thunks.serialize import gpu_program_from_json

from .support.bundles import compile_bundle
from .test_cuda_resident import DENSE, _inputs


class _Result(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_OUT_OF_MEMORY = 2


class FakeDriver:
    """The cuda-bindings calls CudaDevice makes, returning (CUresult, value) tuples as the
    bindings do; memory is ctypes buffers addressed by int, streams and events are ints."""

    CUresult = _Result
    CUevent_flags = SimpleNamespace(CU_EVENT_DISABLE_TIMING=2)

    def __init__(self):
        self.log: list[tuple] = []
        self.keep: dict[int, ctypes.Array] = {}
        self.handles = 100

    def _handle(self):
        self.handles += 1
        return self.handles

    def _alloc(self, size):
        buf = ctypes.create_string_buffer(size)
        self.keep[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def cuModuleLoadData(self, image):
        return _Result.CUDA_SUCCESS, self._handle()

    def cuDriverGetVersion(self):
        return _Result.CUDA_SUCCESS, 13000

    def cuMemAlloc(self, size):
        return _Result.CUDA_SUCCESS, self._alloc(size)

    def cuMemHostAlloc(self, size, flags):
        self.log.append(("cuMemHostAlloc", size, flags))
        return _Result.CUDA_SUCCESS, self._alloc(size)

    def cuMemFreeHost(self, address):
        self.log.append(("cuMemFreeHost", address))
        return (_Result.CUDA_SUCCESS,)

    def cuStreamCreate(self, flags):
        return _Result.CUDA_SUCCESS, self._handle()

    def cuEventCreate(self, flags):
        self.log.append(("cuEventCreate", flags))
        return _Result.CUDA_SUCCESS, self._handle()

    def cuMemcpyHtoDAsync(self, dst, src, size, stream):
        assert isinstance(src, int), "staged uploads copy from pinned memory"
        ctypes.memmove(dst, src, size)
        self.log.append(("HtoD", stream, size))
        return (_Result.CUDA_SUCCESS,)

    def cuMemcpyDtoHAsync(self, dst, src, size, stream):
        ctypes.memmove(dst, src, size)
        self.log.append(("DtoH", stream, size))
        return (_Result.CUDA_SUCCESS,)

    def cuEventRecord(self, event, stream):
        self.log.append(("record", event, stream))
        return (_Result.CUDA_SUCCESS,)

    def cuStreamWaitEvent(self, stream, event, flags):
        self.log.append(("wait", stream, event))
        return (_Result.CUDA_SUCCESS,)

    def cuStreamSynchronize(self, stream):
        self.log.append(("sync", stream))
        return (_Result.CUDA_SUCCESS,)

    def cuGetErrorName(self, err):
        return _Result.CUDA_SUCCESS, b"fake"


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    path = tmp_path_factory.mktemp("transfers") / "dense.bundle"
    compile_bundle(parse_module(DENSE), path, target="cuda")
    return gpu_program_from_json(bytes(read_bundle(str(path)).members["gpu_thunks.json"]))[0]


@pytest.mark.cpu
def test_uploads_and_downloads_go_through_pinned_staging(program):
    cu = FakeDriver()
    dev = CudaDevice(cu, program, b"")
    staging = dev.staging
    assert [e for e in cu.log if e[0] == "cuMemHostAlloc"] == [
        ("cuMemHostAlloc", staging.up.size, 0), ("cuMemHostAlloc", staging.down.size, 0)]
    module = parse_module(DENSE)
    params = module.entry.parameters
    args = _inputs()
    cu.log.clear()
    dev.upload_arrays([(u.slice, args[u.number], params[u.number].shape)
                       for u in program.host_to_device if not u.constant])
    copies = [e for e in cu.log if e[0] == "HtoD"]
    assert len(copies) == 3 and all(e[1] == staging.stream for e in copies)
    record = cu.log.index(("record", staging.uploaded, staging.stream))
    assert record > cu.log.index(copies[-1])
    assert all(("wait", s, staging.uploaded) in cu.log[record:] for s in dev.streams)
    for u in program.host_to_device:  # the device now holds the parameters, as laid out
        if not u.constant:
            assert ctypes.string_at(dev.address(u.slice), u.slice.size) == args[u.number].tobytes()
    # Results come back through the download buffer, copied out into new arrays.
    root = module.entry.root.shape
    items = [(d.slice, root.subshape(d.index)) for d in program.device_to_host]
    want = [np.random.default_rng(1).standard_normal(shape.dims).astype(np.float32)
            for _, shape in items]
    for (s, _), w in zip(items, want, strict=True):
        ctypes.memmove(dev.address(s), w.tobytes(), s.size)
    cu.log.clear()
    back = dev.download_arrays(items)
    for got, w in zip(back, want, strict=True):
        assert got.tobytes() == w.tobytes() and got.base is None  # owned by the caller
    first_copy = next(i for i, e in enumerate(cu.log) if e[0] == "DtoH")
    before = cu.log[:first_copy]
    assert all(e[0] in ("cuEventCreate", "record", "wait") for e in before)
    assert sum(e[0] == "wait" and e[1] == staging.stream for e in before) == len(dev.streams)
    assert cu.log[-1] == ("sync", staging.stream)
    staging.free()
    assert sum(e[0] == "cuMemFreeHost" for e in cu.log) == 2


@pytest.mark.pure
@pytest.mark.parametrize("text,dtype", [("f32[3,4]{0,1}", np.float64), ("s32[2,3,4]{1,2,0}",
                                                                        np.int32)])
def test_write_and_read_arrays_in_device_layout(text, dtype):
    from hloc.runtime.cuda.program import from_device_bytes, to_device_bytes

    shape: Shape = parse_module(f"HloModule m\nENTRY e {{\n  ROOT p = {text} parameter(0)\n}}\n"
                                ).entry.root.shape
    value = np.arange(np.prod(shape.dims)).reshape(shape.dims).astype(dtype)
    raw = np.zeros(value.size * 4, np.uint8)
    write_array(raw, value, shape)
    assert raw.tobytes() == to_device_bytes(value, shape)  # the converting path's bytes
    assert read_array(raw, shape).tobytes() == from_device_bytes(raw.tobytes(), shape).tobytes()


# ---- cuBLAS by default --------------------------------------------------------------------------

def _make(found: bool):
    made = []

    def make():
        if not found:
            raise CudaError("libcublas was not found")
        made.append(1)
        return "cublas-engine"
    return make, made


@pytest.mark.pure
def test_cublas_is_the_default_when_found():
    make, made = _make(True)
    assert cuda_blas.select_gemm("auto", True, make) == "cublas-engine" and made


@pytest.mark.pure
def test_kernel_when_cublas_is_missing_or_not_needed():
    make, made = _make(False)
    assert cuda_blas.select_gemm("auto", True, make) is None
    make, made = _make(True)
    assert cuda_blas.select_gemm("auto", False, make) is None and not made  # nothing to run
    assert cuda_blas.select_gemm("kernel", True, make) is None and not made


@pytest.mark.pure
def test_forced_cublas_must_load():
    make, _ = _make(False)
    with pytest.raises(CudaError, match="not found"):
        cuda_blas.select_gemm("cublas", True, make)


@pytest.mark.pure
def test_gemm_and_tf32_switches():
    assert cuda_blas.gemm_mode({}) == "auto" and cuda_blas.gemm_mode({"HLOC_CUDA_GEMM": "Auto"})
    assert cuda_blas.gemm_mode({"HLOC_CUDA_GEMM": "kernel"}) == "kernel"
    assert cuda_blas.use_cublas({}) is False  # the emulator's default: hloc's kernel
    assert cuda_blas.tf32_allowed({}) is False and cuda_blas.tf32_allowed({"HLOC_CUDA_TF32": "1"})
    with pytest.raises(InputError, match="HLOC_CUDA_TF32"):
        cuda_blas.tf32_allowed({"HLOC_CUDA_TF32": "maybe"})


def _call(t="f32", c="f32"):
    s = SimpleNamespace()
    return SimpleNamespace(a=s, b=s, c=s, a_type=t, b_type=t, c_type=c,
                           compute="f64" if t == "f64" else "f32")


@pytest.mark.pure
@pytest.mark.parametrize("precision,tf32,want", [
    (None, False, 68), (None, True, 77), (PrecisionConfig((0, 0)), True, 77),
    (PrecisionConfig((1, 0)), True, 77), (PrecisionConfig((2, 0)), True, 68),
    (PrecisionConfig((0, 2)), True, 68), (PrecisionConfig((), 11), True, 68),
    (PrecisionConfig((2, 2), 9), True, 77), (PrecisionConfig((0, 0)), False, 68)])
def test_compute_type_follows_xla(precision, tf32, want):
    assert cuda_blas.compute_type(_call(), precision, tf32) == want


@pytest.mark.pure
def test_tf32_never_for_other_types():
    assert cuda_blas.compute_type(_call("bf16", "bf16"), None, True) == 68
    assert cuda_blas.compute_type(_call("f16", "f32"), None, True) == 68
    assert cuda_blas.compute_type(_call("f64", "f64"), None, True) == 70


@pytest.mark.cpu
def test_dot_precisions_name_gemm_thunks():
    module = parse_module(DENSE.replace("rhs_contracting_dims={0}",
                                        "rhs_contracting_dims={0}, "
                                        "operand_precision={highest,highest}"))
    precisions = cuda_blas.dot_precisions(module)
    assert precisions["d"].operand_precision == (2, 2)
