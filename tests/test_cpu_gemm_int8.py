"""int8 products with int32 results on the CPU: the native GEMM's int8 form (pmaddwd on int16
pairs, vpdpwssd where the target has VNNI) at both geometries, the dots that reach it, and
the f64 BLAS fallback where there is no native GEMM."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hloc.codegen.cpu import gemm
from hloc.codegen.target import host_target

from .support.bundles import compile_bundle, kernels_json, load_cpu
from .support.gemm import PAIR_SHAPES, module_assembly, native_library
from .support.hlo import quantized_matmul
from .support.kernels import asm_function
from .support.run import interpret

pytestmark = pytest.mark.cpu

_HOST = host_target()
needs_x86 = pytest.mark.skipif(not _HOST.is_x86, reason="x86-64 code generation")

# (geometry, what the host must have to run it)
_FORMS = {"avx512": (gemm.AVX512, ("avx512f", "avx512bw")), "avx2": (gemm.AVX2, ("avx2", "fma"))}


def _library(form: str):
    geo, needs = _FORMS[form]
    return native_library(form, geo, needs, int8=True)


def _exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The int32 product XLA computes: exact sums, wrapped to 32 bits."""
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


@pytest.mark.parametrize("form", list(_FORMS))
@PAIR_SHAPES
def test_int8_gemm_is_exact(form, batch, m, k, n, accumulate, pad_a, pad_b):
    lib = _library(form)
    rng = np.random.default_rng(m * n + k)
    lda, ldb = k + pad_a, n + pad_b
    a = rng.integers(-128, 128, (batch, m, lda), dtype=np.int8)
    b = rng.integers(-128, 128, (batch, k, ldb), dtype=np.int8)
    a[0, 0, :k] = -128  # the extremes: -128 * -128 pairs are the largest products
    b[0, :, 0] = -128
    c = rng.integers(-2**20, 2**20, (batch, m, n), dtype=np.int32)
    want = np.stack([_exact(a[t, :, :k], b[t, :, :n]) for t in range(batch)])
    want = want + c if accumulate else want
    flags = (gemm.ACCUMULATE if accumulate else 0) | gemm.INT8_OPERANDS
    from hloc.runtime.cpu.gemm import product_list

    words, pointer = product_list([(batch, m, n, k, a.ctypes.data, m * lda, lda, b.ctypes.data,
                                    k * ldb, ldb, c.ctypes.data, m * n, n, flags)], lib.work())
    lib.list_fn(pointer)
    np.testing.assert_array_equal(c, want)


@needs_x86
def test_int8_kernel_is_vpdpwssd_with_vnni_and_pmaddwd_without():
    igemm = asm_function(module_assembly(gemm.AVX512, "sapphirerapids", int8=True),
                         "hloc_igemm")  # its micro-kernels inlined
    # One vpdpwssd per accumulator and step of the full tile's k loop (24 for 12 x 32).
    assert len(re.findall(r"vpdpwssd\s", igemm)) >= gemm.AVX512.mr * gemm.AVX512.vectors
    asm = module_assembly(gemm.AVX2, "x86-64-v3", int8=True)
    assert "vpdpwssd" not in asm and re.search(r"vpmaddwd\s", asm)


_QUANTIZED = quantized_matmul("s8", 200, 300, 256)


@pytest.mark.parametrize("gemm_choice", ["", "blas"])
def test_wide_int8_dot_is_a_library_product(gemm_choice, tmp_path, monkeypatch):
    """A quantized matmul of more than NARROW_COLUMNS columns: the composite's product step is
    the library's (it was a tiled kernel: the held-out 512 x 1024 x 1024 product 5.3 -> 2.8 ms
    on 2 Zen 4 cores, x86-64-v3 6.6 -> 3.5), exact, on the native GEMM or without one."""
    from hloc.runtime.cpu import blas

    if gemm_choice == "blas":
        monkeypatch.setattr(blas.gemm, "product_describer", lambda *cells: None)
    rng = np.random.default_rng(11)
    args = [rng.integers(-128, 128, (200, 300), dtype=np.int8),
            rng.integers(-128, 128, (300, 256), dtype=np.int8),
            rng.uniform(0.01, 0.02, 200).astype(np.float32)]
    path = compile_bundle(_QUANTIZED, tmp_path / "q.bundle")
    (composite,) = kernels_json(path)["composites"].values()
    assert [s["kind"] for s in composite["steps"]][0] == "gemm", composite["steps"]
    got = np.asarray(load_cpu(path).run(args)[0])
    want = _exact(args[0], args[1]).astype(np.float32) * args[2][:, None]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, interpret(_QUANTIZED, args)[0])
