"""Choosing the pool a split runs on: the native pool (through one of runtime/cpu/gemm.py's
splitters, counted) or Python's threads (the splitter answering None)."""

from __future__ import annotations

import pytest


def use_pool(monkeypatch, module, splitter: str, native: bool) -> list:
    """Patch `module.splitter` (e.g. gemm.kernel_splitter) for this test: counted where the
    native pool is wanted (skipping where the host has none), None for Python's threads. The
    list fills with one entry per call the runtime made of it."""
    asked: list = []
    real = getattr(module, splitter)
    if native:
        if real() is None:
            pytest.skip("no native pool here (no AVX2 GEMM, or HLOC_CPU_THREADS=1)")
        monkeypatch.setattr(module, splitter, lambda: asked.append(1) or real())
    else:
        monkeypatch.setattr(module, splitter, lambda: None)
    return asked
