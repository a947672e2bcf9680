"""The native implicit-GEMM convolution (codegen/cpu/conv_gemm.py, runtime/cpu/conv_native.py):
its code for x86-64-v3, the kernel against NumPy, and whole convolution thunks against the
reference interpreter where the host runs it."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from hloc.codegen import llvm
from hloc.codegen.cpu import conv_gemm, gemm
from hloc.codegen.target import cpu_target, host_target
from hloc.runtime.cpu import conv_native
from hloc.runtime.cpu import gemm as runtime_gemm

from .support.kernels import fma_loop_blocks
from .support.pools import use_pool
from .support.run import compare_with_interpreter

pytestmark = pytest.mark.cpu

needs_x86 = pytest.mark.skipif(not host_target().is_x86, reason="x86-64 code generation")
needs_kernel = pytest.mark.skipif(conv_native.library() is None,
                                  reason="the kernel runs on hosts with AVX2 and FMA")


@needs_x86
def test_avx2_conv_tile_keeps_its_tile_in_ymm_registers():
    target = cpu_target("x86-64-v3")
    asm = llvm.compile_ir(conv_gemm.module_text(gemm.AVX2, target), target, 3,
                          assembly=True).assembly
    assert "zmm" not in asm
    # The k loop: 2 x 6 multiply-adds (or an unrolled multiple) with no stack access (a
    # spilled accumulator or row pointer would be one).
    blocks = fma_loop_blocks(asm, f"hloc_sconv_tile{gemm.AVX2.mr}", gemm.AVX2.mr)
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
        words = (ctypes.c_int64 * conv_gemm.CALL_WORDS)(
            lo, hi, oh * ow, ow, xp.ctypes.data, hp * wp * c, stride[0] * wp * c,
            stride[1] * c, kh, kw * c, dh * wp * c, packed.ctypes.data, o, out.ctypes.data, o,
            0)  # no epilogue
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


@needs_kernel
@pytest.mark.parametrize("native", [True, False], ids=["native-pool", "python-pool"])
def test_convolution_pieces_on_either_pool(native, tmp_path, monkeypatch):
    """A convolution cut into row pieces runs them as one job of the native pool where the
    host has one (gemm.call_splitter), else on Python's threads; both match the interpreter."""
    asked = use_pool(monkeypatch, runtime_gemm, "call_splitter", native)
    inp, ker, out, window, labels = CONVS[0]
    text = (f"HloModule c\nENTRY e {{\n  x = {inp} parameter(0)\n  w = {ker} parameter(1)\n"
            f"  ROOT c = {out} convolution(x, w), window={{{window}}}, dim_labels={labels}\n}}\n")
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(_dims(s)).astype(np.float32) for s in (inp, ker)]
    compare_with_interpreter({window: (text, args)}, tmp=tmp_path, rtol=1e-4, atol=1e-3)
    assert bool(asked) == native


def test_native_call_jobs_call_each_argument_once():
    """hloc_call_job calls its function once with each of its arguments, shared with the
    pool."""
    if runtime_gemm.call_splitter() is None:
        pytest.skip("no native pool here (no AVX2 GEMM, or HLOC_CPU_THREADS=1)")
    job_fn, state = runtime_gemm.call_splitter()
    seen: list = []
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda arg: seen.append(arg))
    args = [0x1000 + 8 * i for i in range(13)]
    words = (ctypes.c_int64 * (3 + len(args)))(state, len(args),
                                               ctypes.cast(fn, ctypes.c_void_p).value, *args)
    job_fn(ctypes.c_void_p(ctypes.addressof(words)))
    assert sorted(seen) == args


def _dims(shape_text: str) -> list[int]:
    return [int(d) for d in shape_text.split("[")[1].rstrip("]").split(",")]


# ---- fused epilogues (codegen/cpu/conv_epilogue.py) ---------------------------------------------

def _epilogue_words(words, ops) -> None:
    """Fill the epilogue part of a call's words: ops are (Epilogue, array or None, ld)."""
    base = conv_gemm.CONV_WORDS
    words[base] = len(ops)
    for i, (code, array, ld) in enumerate(ops):
        words[base + 1 + 3 * i:base + 4 + 3 * i] = [int(code),
                                                    0 if array is None else array.ctypes.data, ld]


def _xla_max_zero(x: np.ndarray, zero_first: bool) -> np.ndarray:
    """XLA's maximum with +0 (the interpreter's float_max): NaN-propagating, -0 < +0."""
    if zero_first:  # max(+0, x): +0 where x < 0, else x with its sign bit cleared
        cleared = (x.view(np.uint32) & np.uint32(0x7FFFFFFF)).view(np.float32)
        return np.where(x < 0, np.float32(0), cleared)
    return np.where((x > 0) | np.isnan(x), x, np.float32(0))


@needs_kernel
@pytest.mark.parametrize("zero_first", [False, True])
def test_kernel_epilogue_is_the_unfused_arithmetic_bit_for_bit(zero_first):
    lib = conv_native.library()
    rng = np.random.default_rng(7)
    n, hp, wp, c, o = 2, 8, 9, 5, 32
    xp = rng.standard_normal((n, hp, wp, c), dtype=np.float32)
    w = rng.standard_normal((3, 3, c, o), dtype=np.float32)
    oh, ow, depth = hp - 2, wp - 2, 9 * c
    xp[0, 0, 0, :] = np.nan  # NaNs and infinities flow through the ops (and max keeps NaN)
    xp[1, 3, 4, :] = np.inf
    scale, bias = (rng.standard_normal(o, dtype=np.float32) for _ in range(2))
    residual = rng.standard_normal((n * oh * ow, o + 3), dtype=np.float32)  # row stride o + 3
    residual[5, :4] = [-0.0, 0.0, np.nan, -np.inf]
    packed = np.zeros(depth * o, np.float32)
    lib.pack(depth, o, w.ctypes.data, o, packed.ctypes.data)
    outs = []
    for ops in ([], [(conv_gemm.Epilogue.MUL_COLUMN, scale, 0),
                     (conv_gemm.Epilogue.ADD_COLUMN, bias, 0),
                     (conv_gemm.Epilogue.ADD, residual, o + 3),
                     (conv_gemm.Epilogue.ZERO_MAX if zero_first else conv_gemm.Epilogue.MAX_ZERO,
                      None, 0)]):
        out = np.full((n * oh * ow, o), np.nan, np.float32)
        words = (ctypes.c_int64 * conv_gemm.CALL_WORDS)(
            0, n * oh * ow, oh * ow, ow, xp.ctypes.data, hp * wp * c, wp * c, c, 3, 3 * c,
            wp * c, packed.ctypes.data, o, out.ctypes.data, o)
        _epilogue_words(words, ops)
        lib.conv(ctypes.addressof(words))
        outs.append(out)
    plain, fused = outs
    want = _xla_max_zero(plain * scale + bias + residual[:, :o], zero_first)
    np.testing.assert_array_equal(fused.view(np.uint32), want.view(np.uint32))


FUSED = """HloModule fused
fused {{
  x = f32[2,24,24,32]{{3,2,1,0}} parameter(0)
  w = f32[3,3,32,{o}]{{3,2,1,0}} parameter(1)
  s = f32[{o}]{{0}} parameter(2)
  b = f32[{o}]{{0}} parameter(3)
  r = f32[2,24,24,{o}]{{3,2,1,0}} parameter(4)
  c = f32[2,24,24,{o}]{{3,2,1,0}} convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  sb = f32[2,24,24,{o}]{{3,2,1,0}} broadcast(s), dimensions={{3}}
  m = f32[2,24,24,{o}]{{3,2,1,0}} multiply(sb, c)
  bb = f32[2,24,24,{o}]{{3,2,1,0}} broadcast(b), dimensions={{3}}
  a = f32[2,24,24,{o}]{{3,2,1,0}} add(m, bb)
  ar = f32[2,24,24,{o}]{{3,2,1,0}} add(a, r)
  z = f32[] constant({zero})
  zz = f32[2,24,24,{o}]{{3,2,1,0}} broadcast(z), dimensions={{}}
  ROOT y = f32[2,24,24,{o}]{{3,2,1,0}} maximum(zz, ar)
}}
ENTRY e {{
  x = f32[2,24,24,32]{{3,2,1,0}} parameter(0)
  w = f32[3,3,32,{o}]{{3,2,1,0}} parameter(1)
  s = f32[{o}]{{0}} parameter(2)
  b = f32[{o}]{{0}} parameter(3)
  r = f32[2,24,24,{o}]{{3,2,1,0}} parameter(4)
  ROOT f = f32[2,24,24,{o}]{{3,2,1,0}} fusion(x, w, s, b, r), kind=kOutput, calls=fused
}}
"""


def test_epilogue_chains_are_recognized():
    from hloc.codegen.cpu.conv_epilogue import convolution_epilogue
    from tests.support.kernels import parse_module

    def ops(text):
        comp = next(c for c in parse_module(text).computations if c.name == "fused")
        conv = next(i for i in comp.instructions if i.opcode.name == "CONVOLUTION")
        return convolution_epilogue(comp, conv)

    assert ops(FUSED.format(o=48, zero="0")) == [
        ["mul_column", ["operand", 2]], ["add_column", ["operand", 3]], ["add", ["operand", 4]],
        ["zero_max"]]
    assert ops(FUSED.format(o=48, zero="-0")) is None  # maximum(-0, x) is another op
    # A scale broadcast along another dimension is no per-feature vector.
    assert ops(FUSED.format(o=24, zero="0").replace("broadcast(s), dimensions={3}",
                                                     "broadcast(s), dimensions={1}")) is None


@needs_kernel
@pytest.mark.parametrize("o,fused", [(48, True), (40, False)])  # 40: tails, the two steps
def test_fused_convolution_epilogue_thunks(o, fused, tmp_path, monkeypatch):
    from hloc.runtime.cpu import conv

    ran = []
    real = conv.fused_convolution
    monkeypatch.setattr(conv, "fused_convolution", lambda *a: _note(ran, real(*a)))
    monkeypatch.setattr("hloc.runtime.cpu.kernels.fused_convolution", conv.fused_convolution)
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(d).astype(np.float32)
            for d in ((2, 24, 24, 32), (3, 3, 32, o), (o,), (o,), (2, 24, 24, o))]
    compare_with_interpreter({o: (FUSED.format(o=o, zero="0"), args)}, tmp=tmp_path,
                             rtol=1e-4, atol=1e-3)
    assert ran == [fused]


def _note(ran: list, runner):
    ran.append(runner is not None)
    return runner


def test_a_bad_epilogue_reference_is_refused(tmp_path):
    from hloc.errors import InputError
    from hloc.runtime import load

    from .trust_support import compile_text, repack

    good = compile_text(tmp_path, FUSED.format(o=48, zero="0"), "fused")

    def edit(doc):
        (composite,) = doc["composites"].values()
        composite["steps"][0]["epilogue"]["ops"][0][1] = ["operand", 99]
    bad = repack(good, tmp_path / "bad.bundle", edit_json={"kernels.json": edit})
    with pytest.raises(InputError, match="outside its thunk's slices"):
        load(str(bad), "cpu")
