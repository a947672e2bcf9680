"""The CPU kernel emitter: loop nests over outputs, reductions, in-place updates."""

from __future__ import annotations

from . import conv, dot, fft, inplace, loops, reduce, selscatter, sort, topk  # noqa: F401  (segment kinds register)
from .spec import KernelInfo, KernelSpec, kernel_symbol

__all__ = ["KernelInfo", "KernelSpec", "kernel_symbol"]
