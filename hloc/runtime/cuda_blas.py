"""HLOC_CUDA_GEMM=cublas: Gemm thunks with a BLAS descriptor run through cuBLAS.

The switch: HLOC_CUDA_GEMM unset, empty or `kernel` keeps hloc's tiled GEMM kernel for every
Gemm thunk (the default); `cublas` runs each Gemm thunk whose `blas` descriptor the compiler
recorded (plain dots; see hloc.thunks.gpu.BlasCall) as one
cublasGemmStridedBatchedEx call, and the others with the kernel. `--device cuda-emulated`
honours the same switch with a host BLAS (hloc.runtime.host_blas), so the descriptors are
tested without a GPU.

libcublas is found, in order, in the nvidia-cublas wheel (`pip install nvidia-cublas-cu12`),
under $CUDA_HOME / $CUDA_PATH, and by the system loader (LD_LIBRARY_PATH, ldconfig). One
handle per executable, created on the executable's CUDA context (cuBLAS uses the primary
context the driver runtime made current) and bound to the schedule's current stream before
each call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
from collections.abc import Callable, Iterator, Mapping

from ..errors import InputError
from ..ir import dtypes
from ..thunks.gpu import BlasCall

GEMM_ENV = "HLOC_CUDA_GEMM"
_CHOICES = {"": False, "kernel": False, "cublas": True}

# cuBLAS / CUDA enum values (cublas_api.h, library_types.h).
CUBLAS_OP = {"N": 0, "T": 1}
CUDA_DATA_TYPE = {"f32": 0, "f64": 1, "f16": 2, "bf16": 14}
CUBLAS_COMPUTE = {"f32": 68, "f64": 70}  # CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F
CUBLAS_GEMM_DEFAULT = -1
_SYSTEM_NAMES = ("libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so")


def use_cublas(env: Mapping[str, str] = os.environ) -> bool:
    """Whether HLOC_CUDA_GEMM asks for cuBLAS (InputError for an unknown value)."""
    value = env.get(GEMM_ENV, "").strip().lower()
    if value not in _CHOICES:
        raise InputError(f"{GEMM_ENV}={env.get(GEMM_ENV)!r}: expected 'kernel' or 'cublas'")
    return _CHOICES[value]


# ---- finding libcublas --------------------------------------------------------------------------

def _wheel_dirs() -> list[str]:
    """The nvidia namespace package's directories (where nvidia-* wheels install)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    return list(spec.submodule_search_locations or []) if spec is not None else []


def _newest_first(pattern: str) -> list[str]:
    return sorted(glob.glob(pattern), reverse=True)


def candidates(env: Mapping[str, str] = os.environ,
               wheel_dirs: Callable[[], list[str]] = _wheel_dirs) -> Iterator[str]:
    """Paths (or loader names) to try, best first."""
    for root in wheel_dirs():
        for sub in ("cublas/lib", "cu13/lib", "cu12/lib"):
            yield from _newest_first(os.path.join(root, sub, "libcublas.so*"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if not home:
            continue
        for sub in ("lib64", "lib", "targets/*/lib"):
            yield from _newest_first(os.path.join(home, sub, "libcublas.so*"))
    found = ctypes.util.find_library("cublas")
    yield from ((found,) if found else ()) + _SYSTEM_NAMES


def load_cublas(env: Mapping[str, str] = os.environ, loader: Callable = ctypes.CDLL,
                wheel_dirs: Callable[[], list[str]] = _wheel_dirs):
    """The first libcublas that loads and has cublasGemmStridedBatchedEx; CudaError if none."""
    from .cuda import CudaError

    failures = []
    for path in candidates(env, wheel_dirs):
        try:
            lib = loader(path)
        except OSError as e:
            if os.sep in path:  # a file we found but could not load is worth reporting
                failures.append(f"{path}: {e}")
            continue
        if hasattr(lib, "cublasGemmStridedBatchedEx"):
            return lib
        failures.append(f"{path}: no cublasGemmStridedBatchedEx")
    why = f" ({failures[0]})" if failures else ""
    raise CudaError(f"{GEMM_ENV}=cublas but libcublas was not found{why}: install "
                    "nvidia-cublas-cu12, set CUDA_HOME, or unset " + GEMM_ENV)


# ---- descriptors --------------------------------------------------------------------------------

def stored(call: BlasCall) -> tuple[tuple[int, int], tuple[int, int]]:
    """(rows, cols) of A and B as stored (column-major), after undoing op()."""
    a = (call.m, call.k) if call.transa == "N" else (call.k, call.m)
    b = (call.k, call.n) if call.transb == "N" else (call.n, call.k)
    return a, b


def check_call(call: BlasCall, name: str) -> None:
    """InputError unless the descriptor is well formed and every matrix it touches lies
    inside its slice (a damaged or hand-edited gpu_thunks.json must not make a BLAS call
    write outside its buffer)."""
    known = ({call.a_type, call.b_type, call.c_type} <= CUDA_DATA_TYPE.keys()
             and call.compute in CUBLAS_COMPUTE and {call.transa, call.transb} <= CUBLAS_OP.keys())
    if not known or min(call.m, call.n, call.k, call.batch) < 1:
        raise InputError(f"gpu_thunks.json: bad BLAS descriptor for %{name}")
    (ar, ac), (br, bc) = stored(call)
    for label, rows, cols, ld, stride, s, dtype in (
            ("A", ar, ac, call.lda, call.stride_a, call.a, call.a_type),
            ("B", br, bc, call.ldb, call.stride_b, call.b, call.b_type),
            ("C", call.m, call.n, call.ldc, call.stride_c, call.c, call.c_type)):
        size = dtypes.info(dtypes.from_name(dtype)).byte_size
        last = stride * (call.batch - 1) + ld * (cols - 1) + rows
        if ld < rows or stride < 0 or last * size > s.size:
            raise InputError(f"gpu_thunks.json: BLAS descriptor for %{name} reaches past "
                             f"its {label} slice")


# ---- cuBLAS -------------------------------------------------------------------------------------

def _bind(lib) -> None:
    c_int, c_ll, vp = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
    fn = lib.cublasGemmStridedBatchedEx
    fn.argtypes = [vp, c_int, c_int, c_int, c_int, c_int, vp,
                   vp, c_int, c_int, c_ll, vp, c_int, c_int, c_ll, vp,
                   vp, c_int, c_int, c_ll, c_int, c_int, c_int]
    fn.restype = c_int
    lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    for name in ("cublasCreate_v2", "cublasSetStream_v2"):
        getattr(lib, name).restype = c_int


class CublasGemm:
    """Runs BlasCall descriptors with cuBLAS on a CudaDevice (one handle, created once)."""

    def __init__(self, device, lib=None):
        from .cuda import CudaError

        self.lib = lib if lib is not None else load_cublas()
        _bind(self.lib)
        self.device = device
        self.handle = ctypes.c_void_p()
        status = self.lib.cublasCreate_v2(ctypes.byref(self.handle))
        if status != 0:
            raise CudaError(f"cublasCreate failed (cuBLAS status {status})")
        self.bound_stream: int | None = None

    def _bind_stream(self) -> None:
        stream = self.device.stream_handle()
        if stream != self.bound_stream:
            self._ok(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream)),
                     "cublasSetStream")
            self.bound_stream = stream

    def _ok(self, status: int, what: str) -> None:
        from .cuda import CudaError

        if status != 0:
            raise CudaError(f"{what} failed (cuBLAS status {status})")

    def __call__(self, call: BlasCall, name: str) -> None:
        check_call(call, name)
        self._bind_stream()
        scalar = ctypes.c_double if call.compute == "f64" else ctypes.c_float
        alpha, beta = scalar(call.alpha), scalar(call.beta)
        ptr = lambda s: ctypes.c_void_p(self.device.address(s))  # noqa: E731
        dt = CUDA_DATA_TYPE
        self._ok(self.lib.cublasGemmStridedBatchedEx(
            self.handle, CUBLAS_OP[call.transa], CUBLAS_OP[call.transb], call.m, call.n, call.k,
            ctypes.byref(alpha), ptr(call.a), dt[call.a_type], call.lda, call.stride_a,
            ptr(call.b), dt[call.b_type], call.ldb, call.stride_b, ctypes.byref(beta),
            ptr(call.c), dt[call.c_type], call.ldc, call.stride_c, call.batch,
            CUBLAS_COMPUTE[call.compute], CUBLAS_GEMM_DEFAULT),
            f"cublasGemmStridedBatchedEx for %{name}")
