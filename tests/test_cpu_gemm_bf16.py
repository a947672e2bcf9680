"""bf16 products on the CPU: the native GEMM's hloc_bgemm in both forms (vdpbf16ps pairs,
widening packs), the bf16-dot-operands pass that feeds it, and the BLAS fallback."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from hloc.codegen.cpu import gemm
from hloc.codegen.target import host_target

from .support.bundles import compile_bundle, dumped, load_cpu
from .support.gemm import PAIR_SHAPES, module_assembly, native_library
from .support.kernels import asm_function
from .support.run import interpret

pytestmark = pytest.mark.cpu

BF16 = ml_dtypes.bfloat16
_HOST = host_target()
needs_x86 = pytest.mark.skipif(not _HOST.is_x86, reason="x86-64 code generation")

# (geometry, vdpbf16ps, what the host must have to run it)
_FORMS = {
    "avx512-pairs": (gemm.AVX512, True, ("avx512f", "avx512bf16")),
    "avx512-widen": (gemm.AVX512, False, ("avx512f",)),
    "avx2-widen": (gemm.AVX2, False, ("avx2", "fma")),
}


def _library(form: str):
    geo, pairs, needs = _FORMS[form]
    return native_library(form, geo, needs, dpbf16=pairs)


def _bf16(rng, shape) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(BF16)


@pytest.mark.parametrize("form", list(_FORMS))
@PAIR_SHAPES
def test_bf16_gemm_matches_the_exact_product(form, batch, m, k, n, accumulate, pad_a, pad_b):
    lib = _library(form)
    rng = np.random.default_rng(m * n + k)
    lda, ldb = k + pad_a, n + pad_b
    a, b = _bf16(rng, (batch, m, lda)), _bf16(rng, (batch, k, ldb))
    c = rng.standard_normal((batch, m, n), dtype=np.float32)
    a64, b64 = a[:, :, :k].astype(np.float64), b[:, :, :n].astype(np.float64)
    want = a64 @ b64 + (c if accumulate else 0)
    flags = (gemm.ACCUMULATE if accumulate else 0) | gemm.BF16_OPERANDS
    lib.bf16_fn(batch, m, n, k, a.ctypes.data, m * lda, lda, b.ctypes.data, k * ldb, ldb,
                c.ctypes.data, m * n, n, lib.work(), flags)
    # Exact products, f32 sums: at most k + 1 roundings of the sum of magnitudes.
    bound = (k + 1) * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64) + np.abs(want))
    assert np.all(np.abs(c - want) <= bound + 1e-30)


@needs_x86
def test_pairs_kernel_multiplies_with_vdpbf16ps_and_widening_one_without():
    bgemm = asm_function(module_assembly(gemm.AVX512, "sapphirerapids", dpbf16=True),
                         "hloc_bgemm")  # its micro-kernels inlined
    # One vdpbf16ps per accumulator and step of the full tile's k loop (24 for 12 x 32).
    assert len(re.findall(r"vdpbf16ps\s", bgemm)) >= gemm.AVX512.mr * gemm.AVX512.vectors
    assert "vfmadd" not in bgemm
    asm = module_assembly(gemm.AVX2, "x86-64-v3")
    assert "vdpbf16ps" not in asm
    # The widening packs shift bf16 into the top half of f32 lanes (inlined into hloc_bgemm).
    assert re.search(r"vpslld\s+\$16", asm_function(asm, "hloc_bgemm"))


_LAYER = """HloModule layer
ENTRY e {
  x = bf16[96,256] parameter(0)
  w = bf16[256,320] parameter(1)
  h = f32[96,320] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[96,320] tanh(h)
  hb = bf16[96,320] convert(t)
  v = bf16[320,384] parameter(2)
  ROOT y = f32[96,384] dot(hb, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_bf16_layer_reads_bf16_operands_and_matches_the_interpreter(tmp_path):
    rng = np.random.default_rng(7)
    args = [_bf16(rng, (96, 256)), (_bf16(rng, (256, 320)).astype(np.float32) / 16).astype(BF16),
            _bf16(rng, (320, 384))]
    path = compile_bundle(_LAYER, tmp_path / "layer.bundle", dump_dir=tmp_path / "dump")
    optimized = dumped(tmp_path / "dump", "after_optimizations.hlo").decode()
    # Both dots read bf16 operands: no parameter is converted, the hidden layer is
    # rounded to bf16 (by the fusion computing it) and read as such.
    assert not re.search(r"convert\(%[xwv]\)", optimized), optimized
    assert re.search(r"ROOT %y = f32\[96,384\]\{1,0\} dot\(%fusion, %v\)", optimized), optimized
    got = load_cpu(path).run(args)[0]
    want = interpret(_LAYER, args)[0]
    # f32 sums in another order, and a bf16 rounding of tanh that an ulp may flip.
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


def test_bf16_products_without_the_native_gemm_run_on_widened_copies(monkeypatch):
    from hloc.runtime.cpu import blas

    class Cell:
        def __init__(self, a):
            self.a = a

    monkeypatch.setattr(blas.gemm, "product_describer", lambda *cells: None)
    rng = np.random.default_rng(3)
    a, b = _bf16(rng, (2, 40, 70)), _bf16(rng, (2, 70, 30))
    out = Cell(np.zeros((2, 40, 30), np.float32))
    run = blas.product_runner(Cell(a), Cell(b), out, 2, 40, 30, 2 * 2 * 40 * 30 * 70)
    run()
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out.a, want, rtol=1e-5, atol=1e-5)
    b[:] = 0  # each run reads the operands' current values
    run()
    assert not out.a.any()
