"""Shared pieces of the native GEMM's tests (tests/test_cpu_gemm_*.py): the product shapes
every operand form is checked on, and the library of one form, skipped where the host cannot
run it."""

from __future__ import annotations

import pytest

from hloc.codegen.cpu import gemm
from hloc.codegen.target import cpu_target, host_target

# (batch, m, k, n, accumulate, extra elements per row of A, of B)
PAIR_SHAPES = pytest.mark.parametrize("batch,m,k,n,accumulate,pad_a,pad_b", [
    (1, 1, 1, 1, 0, 0, 0),
    (1, 7, 5, 3, 0, 0, 0),          # odd k: the last pair's second half is zero
    (2, 13, 300, 37, 0, 0, 0),      # column tails, a batch
    (1, 32, 64, 256, 0, 0, 0),
    (1, 100, 1025, 270, 1, 0, 0),   # several k slices (an odd depth), accumulating
    (1, 29, 7, 33, 1, 1, 3),        # odd row strides: pairs start at odd addresses
    (3, 6, 16, 16, 1, 2, 0),
])


def native_library(name: str, geo, needs: tuple[str, ...], **forms):
    """The runtime's GEMM library for `geo` with `forms` (dpbf16=..., int8=...), the AVX2
    geometry compiled for x86-64-v3; skipped where the host lacks a feature of `needs`."""
    from hloc.runtime.cpu.gemm import _Library

    host = host_target()
    if not host.is_x86 or not all(host.has(f) for f in needs):
        pytest.skip(f"the host cannot run the {name} form (needs {', '.join(needs)})")
    target = cpu_target("x86-64-v3") if geo is gemm.AVX2 else None
    return _Library(geo, target=target, **forms)


def module_assembly(geo, cpu: str, **forms) -> str:
    """The assembly of the GEMM module for `geo` with `forms` (dpbf16=..., int8=...), compiled
    at -O3 for CPU `cpu`, as the runtime compiles it."""
    from hloc.codegen import llvm

    target = cpu_target(cpu)
    module = gemm.build_module(geo, **forms)
    module.triple, module.data_layout = target.triple, target.data_layout
    return llvm.compile_ir(str(module), target, 3, assembly=True).assembly
