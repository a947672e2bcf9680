"""The native implicit-GEMM convolution (codegen/cpu/conv_gemm.py, runtime/cpu/conv_native.py):
its code for x86-64-v3, the kernel against NumPy, and whole convolution thunks against the
reference interpreter where the host runs it."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

from hloc.codegen import llvm
from hloc.codegen.cpu import conv_gemm, gemm
from hloc.codegen.target import cpu_target, host_target
from hloc.runtime.cpu import conv_native

from .support.run import compare_with_interpreter

pytestmark = pytest.mark.cpu

needs_x86 = pytest.mark.skipif(not host_target().is_x86, reason="x86-64 code generation")
needs_kernel = pytest.mark.skipif(conv_native.library() is None,
                                  reason="the kernel runs on AVX2 hosts without AVX-512")


def _function(asm: str, name: str) -> str:
    start = asm.index(f"\n{name}:")
    return asm[start:asm.index(".Lfunc_end", start)]


@needs_x86
def test_avx2_conv_tile_keeps_its_tile_in_ymm_registers():
    target = cpu_target("x86-64-v3")
    asm = llvm.compile_ir(conv_gemm.module_text(gemm.AVX2, target), target, 3,
                          assembly=True).assembly
    assert "zmm" not in asm
    kernel = _function(asm, f"hloc_sconv_tile{gemm.AVX2.mr}")
    # The k loop: 2 x 6 multiply-adds (or an unrolled multiple) with no stack access (a
    # spilled accumulator or row pointer would be one).
    blocks = [blk for blk in re.split(r"\n\.LBB\w+:", kernel)
              if len(re.findall(r"vfmadd231ps\s+%ymm", blk)) >= 2 * gemm.AVX2.mr]
    assert blocks
    assert not any("(%rsp)" in blk for blk in blocks)


@needs_x86
def test_avx512_geometry_builds():
    # Only AVX2 hosts run the kernel, but the generator takes any geometry.
    target = cpu_target("x86-64-v4")
    code = llvm.compile_ir(conv_gemm.module_text(gemm.AVX512, target), target, 3)
    assert code.object_code


def _reference(xp, w, oh, ow, stride, dh):
    """The convolution of the padded input xp (N, HP, WP, C) by w (KH, KW, C, O) in f64."""
    kh, kw = w.shape[:2]
    out = np.zeros((xp.shape[0], oh, ow, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh:i * dh + (oh - 1) * stride[0] + 1:stride[0],
                       j:j + (ow - 1) * stride[1] + 1:stride[1]]
            out += np.einsum("nhwc,co->nhwo", patch.astype(np.float64), w[i, j])
    return out


@needs_kernel
@pytest.mark.parametrize("n,hp,wp,c,o,kh,kw,stride,dh,cuts", [
    (1, 5, 7, 3, 5, 3, 3, (1, 1), 1, []),
    (2, 11, 11, 3, 19, 3, 3, (1, 1), 1, [6, 97]),
    (2, 9, 13, 8, 16, 3, 3, (2, 1), 1, []),
    (1, 12, 12, 4, 33, 3, 2, (1, 3), 2, [7]),
    (3, 6, 6, 1, 1, 1, 1, (1, 1), 1, []),
    (1, 18, 18, 64, 64, 3, 3, (1, 1), 1, [96]),
    (1, 30, 30, 16, 24, 3, 3, (1, 1), 1, [200, 500]),
])
def test_kernel_matches_numpy(n, hp, wp, c, o, kh, kw, stride, dh, cuts):
    """Output rows in pieces (cut at `cuts`, as the runtime's threads take them)."""
    lib = conv_native.library()
    rng = np.random.default_rng(n * hp + o)
    xp = rng.standard_normal((n, hp, wp, c), dtype=np.float32)
    w = rng.standard_normal((kh, kw, c, o), dtype=np.float32)
    oh, ow = (hp - (kh - 1) * dh - 1) // stride[0] + 1, (wp - kw) // stride[1] + 1
    depth, nr = kh * kw * c, lib.geo.nr
    packed = np.zeros(-(-o // nr) * nr * depth, np.float32)
    lib.pack(depth, o, w.ctypes.data, o, packed.ctypes.data)
    out = np.full((n, oh, ow, o), np.nan, np.float32)
    bounds = [0, *cuts, n * oh * ow]
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        words = (ctypes.c_int64 * conv_gemm.CONV_WORDS)(
            lo, hi, oh * ow, ow, xp.ctypes.data, hp * wp * c, stride[0] * wp * c,
            stride[1] * c, kh, kw * c, dh * wp * c, packed.ctypes.data, o, out.ctypes.data, o)
        lib.conv(ctypes.addressof(words))
    np.testing.assert_allclose(out, _reference(xp, w, oh, ow, stride, dh), rtol=1e-4,
                               atol=1e-4 * np.sqrt(depth))


# Convolutions too big for the small native kernel (codegen/cpu/conv.py), so the runtime's
# path runs them: padding, strides, dilation along H, tails in O and in the rows, another
# kernel layout (its filter copied before packing) and an output layout it declines.
CONVS = [
    ("f32[2,24,24,32]", "f32[3,3,32,40]", "f32[2,24,24,40]", "size=3x3 pad=1_1x1_1",
     "b01f_01io->b01f"),
    ("f32[3,49,47,32]", "f32[3,3,32,36]", "f32[3,24,23,36]", "size=3x3 stride=2x2",
     "b01f_01io->b01f"),
    ("f32[2,26,24,32]", "f32[3,3,32,48]", "f32[2,22,24,48]", "size=3x3 pad=0_0x1_1 rhs_dilate=2x1",
     "b01f_01io->b01f"),
    ("f32[2,24,24,32]", "f32[40,32,3,3]", "f32[2,24,24,40]", "size=3x3 pad=1_1x1_1",
     "b01f_oi01->b01f"),
    ("f32[2,24,24,32]", "f32[3,3,32,40]", "f32[2,40,24,24]", "size=3x3 pad=1_1x1_1",
     "b01f_01io->bf01"),
]


@needs_kernel
@pytest.mark.parametrize("inp,ker,out,window,labels", CONVS)
def test_convolution_thunks(inp, ker, out, window, labels, tmp_path, monkeypatch):
    ran = []

    def counted(*args):
        runner = conv_native_runner(*args)
        ran.append(runner is not None)
        return runner
    conv_native_runner = conv_native.conv_runner
    monkeypatch.setattr(conv_native, "conv_runner", counted)
    text = (f"HloModule c\nENTRY e {{\n  x = {inp} parameter(0)\n  w = {ker} parameter(1)\n"
            f"  ROOT c = {out} convolution(x, w), window={{{window}}}, dim_labels={labels}\n}}\n")
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(_dims(s)).astype(np.float32) for s in (inp, ker)]
    compare_with_interpreter({window: (text, args)}, tmp=tmp_path, rtol=1e-4, atol=1e-3)
    assert ran == [labels.endswith("b01f")]


def _dims(shape_text: str) -> list[int]:
    return [int(d) for d in shape_text.split("[")[1].rstrip("]").split(",")]
