"""The CUDA back end: thread-indexed kernels from the elemental emitter, NVPTX through
llvmlite, cubins through ptxas, and the GPU thunk schedule.

`compile_cuda(module, plan, options)` is the entry point of `hloc compile --target cuda`.
Importing this package registers every kernel variant.
"""

from __future__ import annotations

from . import (  # noqa: F401  (fft.py registers the fft thunk converter of build.py)
    conv,
    dus,
    fft,
    gemm,
    loop,
    reduce_col,
    reduce_row,
    scatter,
    selscatter,
    sort,
    topk,
    transpose,
)
from .compile import compile_cuda
from .target import CudaTarget, cuda_target

__all__ = ["CudaTarget", "compile_cuda", "cuda_target"]
