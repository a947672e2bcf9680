"""The CPU kernel emitter: loop nests over outputs, reductions, in-place updates."""

from __future__ import annotations

from . import conv, dot, fft, inplace, loops, reduce, selscatter, sort, topk  # noqa: F401  (segment kinds register)
from .emit import EmittedKernels, KernelModuleInfo, build_llvm_module, emit_kernels
from .kernel_spec import KernelInfo, KernelSpec, kernel_symbol

__all__ = ["EmittedKernels", "KernelInfo", "KernelModuleInfo", "KernelSpec", "build_llvm_module",
           "emit_kernels", "kernel_symbol"]
