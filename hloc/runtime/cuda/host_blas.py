"""BLAS descriptors (hloc.thunks.gpu.BlasCall) on a host BLAS: the emulator's
stand-in for cuBLAS under HLOC_CUDA_GEMM=cublas.

The call keeps cuBLAS' column-major contract exactly (ops, leading dimensions, batch strides
in elements, alpha/beta in the compute type) and runs through the Fortran `sgemm_`/`dgemm_`
of numpy's bundled OpenBLAS, one call per batch element at the strided addresses, on the
emulated device memory in place. f16/bf16 matrices are widened to f32 copies with the same
element layout first (cuBLAS' f32 compute type reads them the same way) and C is rounded
back, so every number the descriptor names is exercised as the GPU would use it.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from ...errors import UnsupportedError
from ...ir import dtypes
from ...thunks.gpu import BlasCall
from ..openblas import fortran
from .cublas import check_call

_ROUTINES = {"f32": "sgemm", "f64": "dgemm"}


@functools.cache
def routine(compute: str):
    """(the Fortran gemm of `compute` ("f32"/"f64"), its integer type)."""
    name = _ROUTINES.get(compute)
    found = fortran(name) if name else None
    if found is not None:
        return found
    raise UnsupportedError(f"HLOC_CUDA_GEMM=cublas on cuda-emulated needs numpy's bundled "
                           f"OpenBLAS with {name or compute} (not found)")


class _Matrix:
    """A descriptor's matrix on host memory: in place, or an f32 copy of a narrower type."""

    def __init__(self, raw: np.ndarray, dtype: str, compute: str):
        self.raw = raw.view(dtypes.to_numpy(dtypes.from_name(dtype)))
        wide = np.dtype(np.float64 if compute == "f64" else np.float32)
        self.data = self.raw if self.raw.dtype == wide else self.raw.astype(wide)
        self.itemsize = wide.itemsize

    def at(self, element: int) -> ctypes.c_void_p:
        return ctypes.c_void_p(self.data.ctypes.data + element * self.itemsize)

    def write_back(self) -> None:
        if self.data is not self.raw:
            self.raw[:] = self.data.astype(self.raw.dtype)


class HostBlas:
    """Runs BlasCall descriptors on emulated device memory (cuda_emulated.HostMemory)."""

    def __init__(self, memory):
        self.memory = memory

    def __call__(self, call: BlasCall, name: str) -> None:
        check_call(call, name)
        fn, int_t = routine(call.compute)
        a, b, c = (_Matrix(self.memory.view(s), t, call.compute)
                   for s, t in ((call.a, call.a_type), (call.b, call.b_type),
                                (call.c, call.c_type)))
        scalar = ctypes.c_double if call.compute == "f64" else ctypes.c_float
        ref = ctypes.byref
        fixed = dict(transa=ctypes.c_char(call.transa.encode()),
                     transb=ctypes.c_char(call.transb.encode()),
                     m=int_t(call.m), n=int_t(call.n), k=int_t(call.k), alpha=scalar(call.alpha),
                     lda=int_t(call.lda), ldb=int_t(call.ldb), beta=scalar(call.beta),
                     ldc=int_t(call.ldc))
        f = {key: ref(v) for key, v in fixed.items()}
        for i in range(call.batch):
            fn(f["transa"], f["transb"], f["m"], f["n"], f["k"], f["alpha"],
               a.at(i * call.stride_a), f["lda"], b.at(i * call.stride_b), f["ldb"], f["beta"],
               c.at(i * call.stride_c), f["ldc"], ctypes.c_size_t(1), ctypes.c_size_t(1))
        c.write_back()
