"""The AVX2 native GEMM (codegen/cpu/gemm.py, geometry AVX2): its code for an x86-64-v3
target, and its results where the host can run it."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen import llvm
from hloc.codegen.cpu import gemm
from hloc.codegen.target import cpu_target, host_target

from .support.kernels import fma_loop_blocks

pytestmark = pytest.mark.cpu

needs_x86 = pytest.mark.skipif(not host_target().is_x86, reason="x86-64 code generation")
needs_avx2 = pytest.mark.skipif(not (host_target().has("avx2") and host_target().has("fma")),
                                reason="needs an AVX2 + FMA host")


@needs_x86
def test_avx2_micro_kernel_keeps_its_tile_in_ymm_registers():
    target = cpu_target("x86-64-v3")
    module = gemm.build_module(gemm.AVX2)
    module.triple, module.data_layout = target.triple, target.data_layout
    asm = llvm.compile_ir(str(module), target, 3, assembly=True).assembly
    assert "zmm" not in asm
    # The k loop: blocks of 2 x 6 fused multiply-adds (or an unrolled multiple), and none of
    # them touches the stack (a spilled accumulator or pointer would).
    blocks = fma_loop_blocks(asm, f"hloc_sgemm_tile{gemm.AVX2.mr}", gemm.AVX2.mr)
    assert blocks
    assert not any("(%rsp)" in blk for blk in blocks)


@needs_avx2
@pytest.mark.parametrize("batch,m,k,n,beta", [
    (1, 1, 1, 1, 0), (1, 7, 5, 3, 0), (2, 13, 300, 37, 0), (1, 32, 64, 256, 0),
    (1, 100, 513, 270, 1), (3, 6, 16, 16, 1),
])
def test_avx2_gemm_matches_numpy(batch, m, k, n, beta):
    from hloc.runtime.cpu.gemm import _Library

    lib = _Library(gemm.AVX2)
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((batch, m, k), dtype=np.float32)
    b = rng.standard_normal((batch, k, n), dtype=np.float32)
    c = rng.standard_normal((batch, m, n), dtype=np.float32)
    want = a.astype(np.float64) @ b + (c if beta else 0)
    lib.fn(batch, m, n, k, a.ctypes.data, m * k, k, b.ctypes.data, k * n, n,
           c.ctypes.data, m * n, n, lib.work(), beta)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("cpu,geometry,rows,columns,narrow", [
    ("znver4", "avx512", 1024, 256, True),   # Zen 4: half-width AVX-512, a wide-enough piece
    ("znver4", "avx512", 64, 511, True),
    ("znver4", "avx512", 32, 256, False),    # too few rows
    ("znver4", "avx512", 1024, 512, False),  # a whole AVX-512 column block
    ("sapphirerapids", "avx512", 1024, 256, False),  # full-width AVX-512: not measured
    ("znver4", "avx2", 1024, 256, False),    # no AVX-512 geometry to leave
])
def test_half_width_avx512_hosts_take_the_avx2_geometry_for_narrow_pieces(
        monkeypatch, cpu, geometry, rows, columns, narrow):
    from hloc.runtime.cpu import gemm as runtime_gemm

    monkeypatch.setattr(runtime_gemm, "_host_cpu", lambda: cpu)
    monkeypatch.setattr(runtime_gemm, "host_geometry", lambda: geometry)
    assert runtime_gemm.narrow_pays(rows, columns) is narrow
