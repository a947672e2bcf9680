"""The CPU kernel emitter: loop nests over outputs, reductions, in-place updates."""

from __future__ import annotations

from .kernel_spec import KernelInfo, KernelSpec, kernel_symbol

__all__ = ["KernelInfo", "KernelSpec", "kernel_symbol"]
