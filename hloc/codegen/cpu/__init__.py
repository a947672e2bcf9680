"""The CPU kernel emitter: loop nests over outputs, reductions, in-place updates."""

from __future__ import annotations

from .emit import EmittedKernels, KernelModuleInfo, build_llvm_module, emit_kernels
from .spec import KernelInfo, KernelSpec, kernel_symbol

__all__ = ["EmittedKernels", "KernelInfo", "KernelModuleInfo", "KernelSpec", "build_llvm_module",
           "emit_kernels", "kernel_symbol"]
