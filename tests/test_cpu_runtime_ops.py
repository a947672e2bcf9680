"""Per opcode, the whole CPU path (passes, buffers, thunks, codegen, runtime) against the
reference interpreter, on edge values: NaN, ±inf, ±0, denormals, integer limits and overflow,
empty shapes. Plus Gemm and Convolution thunks in every dimension arrangement, and the
documented handling of every opcode the interpreter knows."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.op_coverage import HOST_FALLBACK, coverage
from hloc.runtime.cpu import hostops
from hloc.runtime.interpreter import registry

from .support.hlo import binary, unary
from .support.run import compare_with_interpreter
from .support.values import edge_values

pytestmark = pytest.mark.cpu


def test_every_interpreter_opcode_has_a_cpu_path():
    """How the CPU backend runs each opcode the interpreter knows (hloc.op_coverage: a kernel
    segment, a thunk with its own runtime path, the elemental emitter, no work, an expander
    pass, or a documented host fallback), and the documented fallbacks are exactly those
    without native code."""
    paths = {r.opcode: r.cpu_path for r in coverage()}
    interpreted = {o.value for o in registry.supported_opcodes()}
    assert not sorted(op for op in interpreted if not paths[op])
    on_host = {op for op in interpreted if paths[op] == "host"}
    assert on_host == {o.value for o in HOST_FALLBACK}, sorted(on_host ^ {o.value for o in HOST_FALLBACK})


def _grid(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.meshgrid(values, values, indexing="ij")
    return a.reshape(-1), b.reshape(-1)


EXACT_F32_UNARY = ["abs", "negate", "floor", "ceil", "round-nearest-afz", "round-nearest-even",
                   "sign", "sqrt"]
APPROX_F32_UNARY = ["exponential", "exponential-minus-one", "log", "log-plus-one", "rsqrt", "cbrt",
                    "tanh", "logistic", "erf"]
TRIG = ["sine", "cosine", "tan"]


@pytest.mark.parametrize("op", EXACT_F32_UNARY + APPROX_F32_UNARY + TRIG)
def test_f32_unary(op, tmp_path):
    x = edge_values("f32")
    exact = op in EXACT_F32_UNARY
    compare_with_interpreter({op: (unary(op, "f32", x.size), [x])}, tmp=tmp_path,
                             rtol=0 if exact else 2e-6, atol=0 if exact else 1e-7)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "power", "remainder",
                                "atan2", "maximum", "minimum"])
def test_f32_binary(op, tmp_path):
    x, y = _grid(edge_values("f32"))
    exact = op not in ("power", "atan2")
    compare_with_interpreter({op: (binary(op, "f32", x.size), [x, y])}, tmp=tmp_path,
                             rtol=0 if exact else 4e-6, atol=0 if exact else 1e-7)


@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_f32_compare(direction, tmp_path):
    x, y = _grid(edge_values("f32"))
    text = binary("compare", "f32", x.size, out="pred", attrs=f", direction={direction}")
    compare_with_interpreter({direction: (text, [x, y])}, tmp=tmp_path)


INT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and",
              "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical", "power"]


@pytest.mark.parametrize("t", ["s32", "u8", "s64", "u32"])
@pytest.mark.parametrize("op", INT_BINARY)
def test_integer_binary(op, t, tmp_path):
    x, y = _grid(edge_values(t))
    compare_with_interpreter({f"{op} {t}": (binary(op, t, x.size), [x, y])}, tmp=tmp_path)


# abs and sign of an unsigned type are invalid HLO: the verifier rejects them, as
# `hloc compile` (and so the test bundles) does.
@pytest.mark.parametrize("op,t", [(op, t) for op in ["abs", "negate", "not", "sign", "popcnt",
                                                     "count-leading-zeros"]
                                  for t in ["s32", "u8", "s8"]
                                  if not (op in ("abs", "sign") and t == "u8")])
def test_integer_unary(op, t, tmp_path):
    x = edge_values(t)
    compare_with_interpreter({f"{op} {t}": (unary(op, t, x.size), [x])}, tmp=tmp_path)


@pytest.mark.parametrize("src,dst", [("f32", "s32"), ("f32", "u8"), ("f32", "bf16"),
                                     ("f32", "f16"), ("s32", "f32"), ("f32", "pred"),
                                     ("bf16", "f32"), ("s64", "f32"), ("f32", "f8e4m3fn")])
def test_convert(src, dst, tmp_path):
    x = edge_values(src)
    compare_with_interpreter({f"{src}->{dst}": (unary("convert", src, x.size, out=dst), [x])},
                             tmp=tmp_path)


EMPTY = """HloModule empty
ENTRY e {
  x = f32[3,0]{1,0} parameter(0)
  y = f32[0]{0} parameter(1)
  a = f32[3,0]{1,0} exponential(x)
  c = f32[] constant(1.5)
  r = f32[3]{0} reduce(x, c), dimensions={1}, to_apply=sum
  n = f32[0]{0} negate(y)
  ROOT t = (f32[3,0]{1,0}, f32[3]{0}, f32[0]{0}) tuple(a, r, n)
}
sum {
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}
"""


def test_empty_shapes(tmp_path):
    args = [np.zeros((3, 0), np.float32), np.zeros((0,), np.float32)]
    (outcome,) = compare_with_interpreter({"empty": (EMPTY, args)}, tmp=tmp_path).values()
    np.testing.assert_array_equal(outcome.got[1], [1.5, 1.5, 1.5])


# ---- contractions -------------------------------------------------------------------------------

DOTS = [
    ("f32[6,5]{1,0}", "f32[5,4]{1,0}", "f32[6,4]{1,0}", "lhs_contracting_dims={1} rhs_contracting_dims={0}"),
    ("f32[5,6]{1,0}", "f32[4,5]{1,0}", "f32[6,4]{1,0}", "lhs_contracting_dims={0} rhs_contracting_dims={1}"),
    ("f32[3,6,5]{2,1,0}", "f32[3,5,4]{2,1,0}", "f32[3,6,4]{2,1,0}",
     "lhs_batch_dims={0} lhs_contracting_dims={2} rhs_batch_dims={0} rhs_contracting_dims={1}"),
    ("f32[6,3,5]{2,1,0}", "f32[4,5,3]{2,1,0}", "f32[3,6,4]{2,1,0}",
     "lhs_batch_dims={1} lhs_contracting_dims={2} rhs_batch_dims={2} rhs_contracting_dims={1}"),
    ("f32[6,5]{0,1}", "f32[5,4]{0,1}", "f32[6,4]{0,1}", "lhs_contracting_dims={1} rhs_contracting_dims={0}"),
    ("f64[7,9]{1,0}", "f64[9]{0}", "f64[7]{0}", "lhs_contracting_dims={1} rhs_contracting_dims={0}"),
    ("s32[4,5]{1,0}", "s32[5,3]{1,0}", "s32[4,3]{1,0}", "lhs_contracting_dims={1} rhs_contracting_dims={0}"),
    ("f32[0,5]{1,0}", "f32[5,4]{1,0}", "f32[0,4]{1,0}", "lhs_contracting_dims={1} rhs_contracting_dims={0}"),
    ("f32[6,0]{1,0}", "f32[0,4]{1,0}", "f32[6,4]{1,0}", "lhs_contracting_dims={1} rhs_contracting_dims={0}"),
]


def _random(shape_text: str, rng) -> np.ndarray:
    dtype, dims = shape_text.split("[")[0], shape_text.split("[")[1].split("]")[0]
    dims = [int(d) for d in dims.split(",") if d]
    values = rng.integers(-5, 5, dims) if dtype.startswith("s") else rng.standard_normal(dims)
    return values.astype({"f32": np.float32, "f64": np.float64, "s32": np.int32}[dtype])


@pytest.mark.parametrize("passes", [None, "layout-assignment"])
@pytest.mark.parametrize("lhs,rhs,out,dims", DOTS)
def test_dot(lhs, rhs, out, dims, passes, tmp_path):
    text = (f"HloModule d\nENTRY e {{\n  a = {lhs} parameter(0)\n  b = {rhs} parameter(1)\n"
            f"  ROOT d = {out} dot(a, b), {dims.replace(' ', ', ')}\n}}\n")
    rng = np.random.default_rng(0)
    args = [_random(lhs, rng), _random(rhs, rng)]
    compare_with_interpreter({dims: (text, args)}, tmp=tmp_path, rtol=1e-5, atol=1e-5,
                             passes=passes)


CONVS = [
    # (input, kernel, output, window, dim_labels, feature_group_count)
    ("f32[2,9,9,3]", "f32[3,3,3,4]", "f32[2,9,9,4]", "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", 1),
    ("f32[2,9,9,3]", "f32[3,3,3,4]", "f32[2,4,4,4]", "size=3x3 stride=2x2", "b01f_01io->b01f", 1),
    ("f32[2,9,9,3]", "f32[3,3,3,4]", "f32[2,5,5,4]", "size=3x3 rhs_dilate=2x2", "b01f_01io->b01f", 1),
    ("f32[2,3,9,9]", "f32[4,3,3,3]", "f32[2,4,9,9]", "size=3x3 pad=1_1x1_1", "bf01_oi01->bf01", 1),
    ("f32[2,8,8,6]", "f32[1,1,6,5]", "f32[2,8,8,5]", "size=1x1", "b01f_01io->b01f", 1),
    ("f32[2,11,3]", "f32[4,3,2]", "f32[2,11,2]", "size=4 pad=1_2", "b0f_0io->b0f", 1),
    ("f32[2,8,8,6]", "f32[3,3,2,6]", "f32[2,8,8,6]", "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", 3),
    ("f32[1,7,7,2]", "f32[3,3,2,2]", "f32[1,15,15,2]", "size=3x3 pad=2_2x2_2 lhs_dilate=2x2",
     "b01f_01io->b01f", 1),
    # The direct (no im2col) path: dilation along H only, stride along W only, uneven
    # padding, and output widths/channels that leave vector tails.
    ("f32[2,9,9,3]", "f32[3,3,3,4]", "f32[2,5,7,4]", "size=3x3 rhs_dilate=2x1", "b01f_01io->b01f", 1),
    ("f32[2,9,9,3]", "f32[3,3,3,4]", "f32[2,7,4,4]", "size=3x3 stride=1x2", "b01f_01io->b01f", 1),
    ("f32[2,9,9,3]", "f32[3,3,3,4]", "f32[2,9,8,4]", "size=3x3 pad=0_2x1_0", "b01f_01io->b01f", 1),
    ("f32[1,6,17,5]", "f32[3,3,5,19]", "f32[1,6,17,19]", "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", 1),
]
# 1-D convolutions, the direct path (`_direct_convolution_1d`): dilated taps one product each,
# with stride, negative padding, input dilation, output channels that leave vector tails, and a
# batch of rows split across threads. Output features that are not minor (bf0) take im2col.
CONVS_1D = [
    ("f32[2,1000,32]", "f32[2,32,33]", "f32[2,1000,33]", "size=2 pad=3_0 rhs_dilate=3", "b0f_0io->b0f"),
    ("f32[3,801,32]", "f32[3,32,40]", "f32[3,399,40]", "size=3 stride=2 rhs_dilate=2", "b0f_0io->b0f"),
    ("f32[2,600,32]", "f32[3,32,40]", "f32[2,594,40]", "size=3 pad=-1_-3", "b0f_0io->b0f"),
    ("f32[2,400,32]", "f32[3,32,40]", "f32[2,801,40]", "size=3 pad=2_2 lhs_dilate=2", "b0f_0io->b0f"),
    ("f32[2,32,600]", "f32[37,32,3]", "f32[2,37,598]", "size=3", "bf0_oi0->bf0"),
    ("f32[2,32,600]", "f32[37,32,3]", "f32[2,598,37]", "size=3", "bf0_oi0->b0f"),
    ("f32[3,700,48]", "f32[2,48,40]", "f32[3,700,40]", "size=2 pad=8_0 rhs_dilate=8", "b0f_0io->b0f"),
]


@pytest.mark.parametrize("inp,ker,out,window,labels,groups", CONVS)
def test_convolution(inp, ker, out, window, labels, groups, tmp_path):
    text = (f"HloModule c\nENTRY e {{\n  x = {inp} parameter(0)\n  w = {ker} parameter(1)\n"
            f"  ROOT c = {out} convolution(x, w), window={{{window}}}, dim_labels={labels}, "
            f"feature_group_count={groups}\n}}\n")
    rng = np.random.default_rng(1)
    args = [_random(inp, rng), _random(ker, rng)]
    compare_with_interpreter({window: (text, args)}, tmp=tmp_path, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("inp,ker,out,window,labels", CONVS_1D)
def test_convolution_1d_direct(inp, ker, out, window, labels, tmp_path, monkeypatch):
    from hloc.codegen.cpu.conv import wants_native
    from hloc.ir.text.parser import parse_module
    from hloc.runtime.cpu import conv, gemm

    direct = []
    original = conv._direct_convolution_1d

    def recorded(*args):
        runner = original(*args)
        direct.append(runner is not None)
        return runner
    monkeypatch.setattr(conv, "_direct_convolution_1d", recorded)
    text = (f"HloModule c\nENTRY e {{\n  x = {inp} parameter(0)\n  w = {ker} parameter(1)\n"
            f"  ROOT c = {out} convolution(x, w), window={{{window}}}, dim_labels={labels}\n}}\n")
    rng = np.random.default_rng(3)
    args = [_random(inp, rng), _random(ker, rng)]
    assert not wants_native(parse_module(text).entry.root)  # the runtime's path, not a kernel
    compare_with_interpreter({window: (text, args)}, tmp=tmp_path, rtol=1e-4, atol=1e-4)
    assert direct == [gemm.native() is not None and not labels.endswith("bf0")]


FUSED_CONV = """HloModule fc
ENTRY e {
  x = f32[2,9,9,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,4]{3,2,1,0} parameter(1)
  b = f32[4]{0} parameter(2)
  c = f32[2,9,9,4]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  bb = f32[2,9,9,4]{3,2,1,0} broadcast(b), dimensions={3}
  s = f32[2,9,9,4]{3,2,1,0} add(c, bb)
  z = f32[] constant(0)
  zz = f32[2,9,9,4]{3,2,1,0} broadcast(z), dimensions={}
  ROOT r = f32[2,9,9,4]{3,2,1,0} maximum(s, zz)
}
"""


def test_fused_convolution_epilogue(tmp_path):
    rng = np.random.default_rng(2)
    args = [rng.standard_normal((2, 9, 9, 3)).astype(np.float32),
            rng.standard_normal((3, 3, 3, 4)).astype(np.float32),
            rng.standard_normal(4).astype(np.float32)]
    compare_with_interpreter({"case": (FUSED_CONV, args)}, tmp=tmp_path, rtol=1e-4, atol=1e-4)


def _windows(x: np.ndarray, span: int, step: int, reverse: bool) -> np.ndarray:
    """An im2col-style view of x (N, H, W, C): (N, OH, OW, KH, KW, C), taps `step` apart."""
    view = np.lib.stride_tricks.sliding_window_view(x, (span, span), axis=(1, 2))
    taps = slice(None, None, -step) if reverse else slice(None, None, step)
    return view[:, :, :, :, taps, taps].transpose(0, 1, 2, 4, 5, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("reverse", [False, True])
def test_copy_jobs_copy_strided_views(dtype, reverse):
    """The native copy job (im2col gathers) gives np.copyto's array for views with runs of
    contiguous elements, reversed windows (negative strides) and transposes (no runs)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 11, 12, 5)) * 100).astype(dtype)
    for src in (_windows(x, 5, 2, reverse), _windows(x, 3, 1, reverse),
                x.transpose(3, 1, 2, 0), x[:, ::-2, 1::3, :2]):
        dst = np.zeros(src.shape, dtype)
        job = hostops.copy_job(dst, src)
        assert job is not None
        job.run()
        np.testing.assert_array_equal(dst, src)
        job.run()  # a job runs again from the start of its batch
        np.testing.assert_array_equal(dst, src)


def test_copy_jobs_refuse_what_they_cannot_copy():
    a = np.zeros((4, 5), np.float32)
    assert hostops.copy_job(a, np.zeros((4, 5), np.float64)) is None
    assert hostops.copy_job(a, np.zeros((5, 4), np.float32)) is None
    assert hostops.copy_job(np.zeros(6, np.float32), np.zeros(6, np.float32)) is None
    assert hostops.copy_job(np.zeros((2, 3), np.int16), np.zeros((2, 3), np.int16)) is None
    assert hostops.copy_job(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32)) is None
