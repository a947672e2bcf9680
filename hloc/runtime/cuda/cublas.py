"""cuBLAS for the Gemm thunks that carry a BLAS descriptor (plain dots).

The switch, HLOC_CUDA_GEMM (`gemm_mode`):
- unset, empty or `auto` (the default): on `--device cuda`, cuBLAS whenever libcublas loads,
  else hloc's tiled GEMM kernel (`select_gemm`); on `--device cuda-emulated`, the kernel (the
  emulator exists to check hloc's kernels; its host BLAS would not round like cuBLAS anyway);
- `kernel`: hloc's kernel for every Gemm thunk;
- `cublas`: cuBLAS, and a clear error when libcublas is missing; on `cuda-emulated`, the same
  column-major call through a host BLAS (hloc.runtime.cuda.host_blas), so the descriptors are
  tested without a GPU.
Each described Gemm thunk is one cublasGemmStridedBatchedEx call; the others use the kernel.

Precision (`compute_type`), as XLA's GPU back end decides it (matmul_utils
GetBlasComputationType): an f32 dot may use TF32 tensor cores when TF32 is enabled, its
precision_config is at most HIGH (DEFAULT=0, HIGH=1) and its output is f32; HIGHEST or
algorithm ALG_DOT_F32_F32_F32 always computes in full f32 (CUBLAS_COMPUTE_32F). XLA enables
TF32 globally by default, so jax's default matmul precision gives TF32 on Ampere and later.
hloc does NOT by default: HLOC_CUDA_TF32 unset or `0` computes every f32 dot in full f32 (what
hloc's kernel, the interpreter and XLA's CPU back end compute, and what jax gives with
jax_default_matmul_precision="highest"); HLOC_CUDA_TF32=1 applies XLA's rule above.

libcublas is found, in order, in the nvidia-cublas wheel (`pip install nvidia-cublas`),
under $CUDA_HOME / $CUDA_PATH, and by the system loader (LD_LIBRARY_PATH, ldconfig). One
handle per executable, created on the executable's CUDA context (cuBLAS uses the primary
context the driver runtime made current) and bound to the schedule's current stream before
each call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Iterator, Mapping

from ...errors import InputError
from ...ir import dtypes
from ...thunks.gpu import BlasCall
from ...util.log import get_logger
from .vendor import Switch, library_candidates, load_first, precisions
from .vendor import wheel_dirs as vendor_wheel_dirs

GEMM_ENV = "HLOC_CUDA_GEMM"
TF32_ENV = "HLOC_CUDA_TF32"
GEMM_MODES = ("auto", "kernel", "cublas")
_TF32_CHOICES = {"": False, "0": False, "off": False, "1": True, "xla": True}

# cuBLAS / CUDA enum values (cublas_api.h, library_types.h).
CUBLAS_OP = {"N": 0, "T": 1}
CUDA_DATA_TYPE = {"f32": 0, "f64": 1, "f16": 2, "bf16": 14}
CUBLAS_COMPUTE = {"f32": 68, "f64": 70}  # CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F
CUBLAS_COMPUTE_32F_FAST_TF32 = 77
# PrecisionConfig values (xla_data.proto): operand precision HIGH, and the two f32 algorithms.
PRECISION_HIGH = 1
ALG_DOT_TF32_TF32_F32 = 9
ALG_DOT_F32_F32_F32 = 11
CUBLAS_GEMM_DEFAULT = -1
log = get_logger(__name__)
_SYSTEM_NAMES = ("libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so")


GEMM = Switch(GEMM_ENV, "cublas", "cuBLAS", "hloc's GEMM kernel")
gemm_mode = GEMM.mode  # HLOC_CUDA_GEMM as "auto", "kernel" or "cublas"
use_cublas = GEMM.forced  # the emulator's switch for its host BLAS


def tf32_allowed(env: Mapping[str, str] = os.environ) -> bool:
    """Whether HLOC_CUDA_TF32 turns on XLA's TF32 rule (default: off, full f32)."""
    value = env.get(TF32_ENV, "").strip().lower()
    if value not in _TF32_CHOICES:
        raise InputError(f"{TF32_ENV}={env.get(TF32_ENV)!r}: expected 0 or 1")
    return _TF32_CHOICES[value]


def compute_type(call: BlasCall, precision, tf32: bool) -> int:
    """The cublasComputeType_t for `call`, from its dot's PrecisionConfig (None: DEFAULT)."""
    if not tf32 or call.compute != "f32" or call.c_type != "f32" or call.a_type != "f32":
        return CUBLAS_COMPUTE[call.compute]
    algorithm = precision.algorithm if precision is not None else 0
    if algorithm:
        fast = algorithm == ALG_DOT_TF32_TF32_F32
    else:
        levels = precision.operand_precision if precision is not None else ()
        fast = max(levels, default=0) <= PRECISION_HIGH
    return CUBLAS_COMPUTE_32F_FAST_TF32 if fast else CUBLAS_COMPUTE[call.compute]


def select_gemm(mode: str, has_descriptors: bool, make: Callable):
    """The BLAS engine for `--device cuda` (vendor.Switch.select): cuBLAS when it loads in
    `auto` (else hloc's kernel, logged), always with `cublas`, never with `kernel`."""
    return GEMM.select(mode, has_descriptors, make, log.info)


# ---- finding libcublas --------------------------------------------------------------------------

def candidates(env: Mapping[str, str] = os.environ,
               wheel_dirs: Callable[[], list[str]] = vendor_wheel_dirs) -> Iterator[str]:
    """Paths (or loader names) to try, best first."""
    return library_candidates("libcublas.so*", ("cublas/lib", "cu13/lib", "cu12/lib"),
                              ("CUDA_HOME", "CUDA_PATH"), "cublas", _SYSTEM_NAMES, env,
                              wheel_dirs)


def load_cublas(env: Mapping[str, str] = os.environ, loader: Callable = ctypes.CDLL,
                wheel_dirs: Callable[[], list[str]] = vendor_wheel_dirs):
    """The first libcublas that loads and has cublasGemmStridedBatchedEx; CudaError if none."""
    return load_first(candidates(env, wheel_dirs), loader,
                      lambda lib: hasattr(lib, "cublasGemmStridedBatchedEx"),
                      "cublasGemmStridedBatchedEx", "libcublas", "nvidia-cublas", GEMM)


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


def dot_precisions(module) -> dict:
    """{thunk name: the PrecisionConfig of its dot} (vendor.precisions)."""
    return precisions(module, "dot")


WORKSPACE_BYTES = 32 << 20


class CublasGemm:
    """Runs BlasCall descriptors with cuBLAS on a CudaDevice (one handle, created once).

    `precisions` ({thunk name: PrecisionConfig}) and `tf32` pick each call's compute type
    (`compute_type`); without them every f32 dot computes in full f32."""

    def __init__(self, device, lib=None, precisions=None, tf32: bool = False):
        from .driver import CudaError

        self.precisions = precisions or {}
        self.tf32 = tf32
        self.lib = lib if lib is not None else load_cublas()
        _bind(self.lib)
        self.device = device
        self.handle = ctypes.c_void_p()
        status = self.lib.cublasCreate_v2(ctypes.byref(self.handle))
        if status != 0:
            raise CudaError(f"cublasCreate failed (cuBLAS status {status})")
        self.bound_stream: int | None = None
        # A workspace of its own, so a call captured into a CUDA graph never allocates
        # (cuBLAS' advice for graphs; 32 MiB is its size for Hopper, enough for older GPUs).
        allocate = getattr(device, "allocate", None)
        if allocate is not None and hasattr(self.lib, "cublasSetWorkspace_v2"):
            fn = self.lib.cublasSetWorkspace_v2
            fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
            self._ok(fn(self.handle, ctypes.c_void_p(allocate(WORKSPACE_BYTES)), WORKSPACE_BYTES),
                     "cublasSetWorkspace")

    def _bind_stream(self) -> None:
        stream = self.device.stream_handle()
        if stream != self.bound_stream:
            self._ok(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream)),
                     "cublasSetStream")
            self.bound_stream = stream

    def _ok(self, status: int, what: str) -> None:
        from .driver import CudaError

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
            compute_type(call, self.precisions.get(name), self.tf32), CUBLAS_GEMM_DEFAULT),
            f"cublasGemmStridedBatchedEx for %{name}")
