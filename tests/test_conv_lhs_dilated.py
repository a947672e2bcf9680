"""Base-dilated (transposed) convolutions visit only the window taps that land on input
elements (hloc.codegen.elemental.windows.TapSequence): the CUDA loop kernel and conv.core
(on the emulator) and the CPU's native kernel and host paths against the reference
interpreter, in every form that changes which taps are real (dilation 2 / 3 / mixed per
dimension, strides, window dilation sharing factors with the base dilation, asymmetric and
negative padding, reversal, 1-3 spatial dims, groups, other dimension labels); plus the
number of taps the CUDA emitter's loops visit, which is the whole window without skipping."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest
from llvmlite import ir

from hloc.codegen import llvm
from hloc.codegen.cuda import conv as cuda_conv
from hloc.codegen.elemental.context import EmitContext
from hloc.codegen.elemental.scalar import const
from hloc.codegen.elemental.types import I64, elem_type
from hloc.codegen.target import host_target
from hloc.ir import Opcode
from hloc.ir.text.parser import parse_module
from hloc.ir.verifier import verify
from hloc.passes.conv_phases import ConvPhases
from hloc.passes.pipelines import pipeline_spec
from hloc.runtime.interpreter import evaluate

from .support.bundles import members, variants
from .support.hlo import conv_out_size
from .support.kernels import check_hlo
from .support.run import compare_with_interpreter, emulate_hlo


def conv_text(form: dict, t: str = "f32") -> str:
    """A convolution module for `form` (see FORMS); `labels` (input, kernel, output) name each
    dimension of the operands in dim_labels' letters (default NHWC / HWIO / NHWC)."""
    ns = len(form["spatial"])
    f = {"stride": [1] * ns, "pad": [(0, 0)] * ns, "lhs": [1] * ns, "rhs": [1] * ns,
         "rev": [0] * ns, "groups": 1, "batch_groups": 1, **form}
    digits = "012"[:ns]
    labels = f.get("labels", (f"b{digits}f", f"{digits}io", f"b{digits}f"))
    out = [conv_out_size(*a) for a in zip(f["spatial"], f["kernel"], f["stride"], f["pad"],
                                      f["lhs"], f["rhs"], strict=True)]
    assert all(out), out
    sizes = [{"b": f["n"], "f": f["c"], **dict(zip(digits, f["spatial"], strict=True))},
             {"i": f["c"] // f["groups"], "o": f["o"],
              **dict(zip(digits, f["kernel"], strict=True))},
             {"b": f["n"] // f["batch_groups"], "f": f["o"], **dict(zip(digits, out, strict=True))}]
    x, w, y = (f"{t}[{','.join(str(s[ch]) for ch in label)}]"
               for s, label in zip(sizes, labels, strict=True))

    def joined(key, fmt=str):
        return "x".join(fmt(v) for v in f[key])

    window = (f"size={joined('kernel')} stride={joined('stride')} "
              f"pad={joined('pad', lambda p: f'{p[0]}_{p[1]}')} lhs_dilate={joined('lhs')} "
              f"rhs_dilate={joined('rhs')} rhs_reversal={joined('rev')}")
    return (f"HloModule c\nENTRY e {{\n  x = {x} parameter(0)\n  w = {w} parameter(1)\n"
            f"  ROOT c = {y} convolution(x, w), window={{{window}}}, "
            f"dim_labels={labels[0]}_{labels[1]}->{labels[2]}, "
            f"feature_group_count={f['groups']}, batch_group_count={f['batch_groups']}\n}}\n")


FORMS = {
    # The CNN training step's input gradient (samples/models/cnn_train_step.hlo).
    "cnn_transposed": dict(n=2, spatial=[5, 4], c=3, o=4, kernel=[3, 3], lhs=[2, 2],
                           pad=[(2, 1), (2, 1)]),
    "d3_1d": dict(n=2, spatial=[7], c=3, o=2, kernel=[4], lhs=[3], pad=[(3, 2)]),
    "d2_d3_mixed": dict(n=1, spatial=[5, 4], c=2, o=3, kernel=[3, 5], lhs=[2, 3],
                        pad=[(1, 2), (4, 0)]),
    "one_dim_dilated": dict(n=2, spatial=[6, 5], c=2, o=3, kernel=[3, 3], lhs=[1, 2],
                            pad=[(1, 1), (1, 2)]),
    "strided": dict(n=1, spatial=[6, 7], c=2, o=3, kernel=[4, 5], lhs=[2, 3], stride=[3, 2],
                    pad=[(2, 1), (3, 3)]),
    # gcd(window dilation, base dilation) > 1: step d/g, and no tap at all for some outputs.
    "window_dilation_shared": dict(n=1, spatial=[6, 5], c=2, o=2, kernel=[3, 3], lhs=[2, 4],
                                   rhs=[2, 2], pad=[(2, 1), (3, 2)]),
    "window_dilation_6_4": dict(n=2, spatial=[9], c=2, o=3, kernel=[4], lhs=[4], rhs=[6],
                                pad=[(5, 7)]),
    # gcd 1 with a non-trivial inverse: tap k hits when 2k = pad - o (mod 3).
    "window_dilation_coprime": dict(n=2, spatial=[6], c=2, o=2, kernel=[4], lhs=[3], rhs=[2],
                                    pad=[(2, 3)], stride=[2]),
    "same_dilations": dict(n=1, spatial=[5, 6], c=2, o=2, kernel=[3, 2], lhs=[2, 3],
                           rhs=[2, 3], pad=[(1, 2), (2, 2)]),
    "negative_pad": dict(n=2, spatial=[7, 6], c=2, o=3, kernel=[3, 2], lhs=[2, 3],
                         pad=[(-2, 1), (-1, -2)], stride=[1, 2]),
    # Reversed windows whose phases are not symmetric (4 taps by 2, 3 taps by 3), and one not.
    "reversed": dict(n=2, spatial=[5, 4], c=3, o=2, kernel=[4, 3], lhs=[2, 3], rev=[1, 1],
                     pad=[(2, 1), (1, 3)]),
    "reversed_one": dict(n=1, spatial=[5, 4], c=2, o=3, kernel=[4, 3], lhs=[2, 2], rev=[0, 1],
                         pad=[(1, 2), (2, 0)]),
    "three_d": dict(n=1, spatial=[3, 4, 3], c=2, o=3, kernel=[2, 3, 2], lhs=[2, 1, 3],
                    stride=[1, 2, 1], pad=[(1, 1), (1, 0), (2, 1)]),
    # More dilation than window: outputs between input elements have no tap at all.
    "sparse": dict(n=2, spatial=[4], c=2, o=2, kernel=[3], lhs=[5], pad=[(4, 4)]),
    "feature_groups": dict(n=2, spatial=[4, 5], c=6, o=6, kernel=[3, 3], lhs=[2, 2],
                           pad=[(1, 1), (2, 1)], groups=3),
    "batch_groups": dict(n=4, spatial=[4, 4], c=3, o=6, kernel=[3, 2], lhs=[2, 3],
                         pad=[(1, 2), (0, 1)], batch_groups=2),
    # Batch as the input feature (JAX's weight-gradient form) and NCHW-style labels.
    "batch_as_feature": dict(n=3, spatial=[5, 4], c=4, o=2, kernel=[3, 2], lhs=[2, 2],
                             pad=[(1, 1), (0, 1)], labels=("f01b", "i01o", "01bf")),
    "channels_first": dict(n=2, spatial=[4, 5], c=3, o=4, kernel=[3, 3], lhs=[3, 2],
                           pad=[(2, 2), (1, 1)], labels=("bf01", "oi01", "bf01")),
}


def _inputs(text: str, seed: int, t: str = "f32"):
    module = parse_module(text)
    rng = np.random.default_rng(seed)
    shapes = [p.shape.dims for p in module.entry.parameters]
    if t == "s32":
        return [rng.integers(-9, 10, s).astype(np.int32) for s in shapes]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


# ---- CUDA on the emulator ---------------------------------------------------------------------

@pytest.mark.cpu
@pytest.mark.parametrize("name", list(FORMS))
def test_cuda_matches_interpreter(name):
    text = conv_text(FORMS[name])
    got, want, ex = emulate_hlo(text, _inputs(text, 0))
    assert variants(ex)["conv.core"] + variants(ex)["loop"] == 1, variants(ex)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
def test_cuda_integers_exact():
    text = conv_text(FORMS["strided"], "s32")
    got, want, _ = emulate_hlo(text, _inputs(text, 1, "s32"))
    np.testing.assert_array_equal(got[0], want[0])


FUSED = """HloModule f
ENTRY e {
  x = f32[2,5,4,3] parameter(0)
  w = f32[3,3,4,3] parameter(1)
  m = f32[2,10,8,4] parameter(2)
  c = f32[2,10,8,4] convolution(x, w), window={size=3x3 pad=2_1x2_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f
  zero = f32[] constant(0)
  zeros = f32[2,10,8,4] broadcast(zero), dimensions={}
  gt = pred[2,10,8,4] compare(m, zeros), direction=GT
  ROOT s = f32[2,10,8,4] select(gt, c, zeros)
}
"""

# Few outputs, long sums: conv.split shares each output between threads; its flattened
# reduction keeps visiting every tap (and must still skip the holes).
LONG = """HloModule l
ENTRY e {
  x = f32[1,8,8,128] parameter(0)
  w = f32[3,3,128,16] parameter(1)
  ROOT c = f32[1,8,8,16] convolution(x, w), window={size=3x3 pad=-3_-2x-2_-3 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f
}
"""


@pytest.mark.cpu
def test_cuda_fused_like_the_cnn_step():
    """The CNN step's fusion.8: a transposed convolution under a ReLU-gradient select, which
    runs as conv.core (the loop kernel's convolution into scratch) and the epilogue."""
    got, want, ex = emulate_hlo(FUSED, _inputs(FUSED, 2))
    assert variants(ex)["conv.core"] == 1, variants(ex)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
def test_cuda_long_sums_keep_every_tap():
    got, want, ex = emulate_hlo(LONG, _inputs(LONG, 3))
    assert variants(ex)["conv.split"] + variants(ex)["conv.core"] == 1, variants(ex)
    recipe = next(r for r in ex.program.kernels if r.variant in ("conv.split", "conv.core"))
    assert recipe.param("group", 0) or recipe.param("slices", 0)  # threads share outputs
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


# ---- how many taps the CUDA emitter visits ----------------------------------------------------

def _real_taps(form: dict, dim: int, o: int) -> int:
    """Taps of spatial `dim` at output position `o` that read an input element."""
    ns = len(form["spatial"])
    stride, lhs = form.get("stride", [1] * ns)[dim], form.get("lhs", [1] * ns)[dim]
    rhs, pad = form.get("rhs", [1] * ns)[dim], form.get("pad", [(0, 0)] * ns)[dim][0]
    n = form["spatial"][dim]
    positions = [o * stride + k * rhs - pad for k in range(form["kernel"][dim])]
    return sum(p >= 0 and p % lhs == 0 and p // lhs < n for p in positions)


def _visits(form: dict, monkeypatch) -> tuple[np.ndarray, np.ndarray]:
    """(reduction loop iterations, value with all-ones operands) of every output element of
    `form`'s convolution, from the CUDA convolution emitter JIT-compiled for the host with a
    counter in its innermost loop body."""
    instr = parse_module(conv_text(form)).entry.root
    real = cuda_conv.accumulate_loops
    m = ir.Module("visits")
    f32 = elem_type(instr.shape.element_type).value_type
    fn = ir.Function(m, ir.FunctionType(f32, [ir.PointerType(), ir.PointerType()]), "visit")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = EmitContext(m, b, host_target())

    def counting(ctx, bounds, init, body):
        def counted(ivs, accs):
            n = b.load(fn.args[1], typ=I64)
            b.store(b.add(n, ctx.i64(1)), fn.args[1])
            return body(ivs, accs)
        return real(ctx, bounds, init, counted)

    monkeypatch.setattr(cuda_conv, "accumulate_loops", counting)
    one = lambda index: const(elem_type(instr.operands[0].shape.element_type), 1)  # noqa: E731
    generate = cuda_conv.convolution(ctx, instr, [one, one])
    index = [b.load(b.gep(fn.args[0], [ctx.i64(d)], source_etype=I64), typ=I64)
             for d in range(instr.shape.rank)]
    b.ret(generate(index))
    library = llvm.JitLibrary(llvm.compile_ir(str(m), host_target()).object_code)
    call = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p)(
        library.address("visit"))
    dims = instr.shape.dims
    counts, values = np.zeros(dims, np.int64), np.zeros(dims, np.float32)
    for at in np.ndindex(*dims):
        idx, n = np.array(at, np.int64), np.zeros(1, np.int64)
        values[at] = call(idx.ctypes.data, n.ctypes.data)
        counts[at] = n[0]
    return counts, values


@pytest.mark.cpu
@pytest.mark.parametrize("name", ["cnn_transposed", "d2_d3_mixed", "one_dim_dilated",
                                  "window_dilation_shared", "window_dilation_6_4",
                                  "window_dilation_coprime", "negative_pad", "sparse"])
def test_cuda_visits_only_real_taps(name, monkeypatch):
    """A base-dilated dimension's loop runs over the taps that read an input element (none on
    holes or padding; an undilated dimension still visits its whole window): with d = 2 in
    two dimensions, about a quarter of the window."""
    form = {**FORMS[name], "n": 1}
    counts, values = _visits(form, monkeypatch)
    ns, cg = len(form["spatial"]), form["c"]
    lhs = form.get("lhs", [1] * ns)
    for at in np.ndindex(*counts.shape):  # (batch, *spatial, feature)
        real = [_real_taps(form, i, at[1 + i]) for i in range(ns)]
        visited = [r if lhs[i] > 1 else form["kernel"][i] for i, r in enumerate(real)]
        assert counts[at] == cg * math.prod(visited), (at, counts[at], visited)
        assert values[at] == cg * math.prod(real), (at, values[at], real)
    window = cg * math.prod(form["kernel"])
    if name == "cnn_transposed":
        assert counts.sum() * 3 < counts.size * window  # 4/9 + 2/9 + 2/9 + 1/9 of the window


# ---- the CPU: native kernel and host paths --------------------------------------------------------

@pytest.mark.cpu
@pytest.mark.parametrize("name", list(FORMS))
def test_cpu_native_kernel_matches_interpreter(name):
    text = conv_text(FORMS[name])
    check_hlo(text, _inputs(text, 4), rtol=1e-5, atol=1e-5, chunks=3)


@pytest.mark.cpu
@pytest.mark.parametrize("name", list(FORMS))
def test_cpu_pipeline_matches_interpreter(name, conv_path, tmp_path):
    text = conv_text(FORMS[name])
    compare_with_interpreter({name: (text, _inputs(text, 5))}, tmp=tmp_path, rtol=1e-5,
                             atol=1e-5)


# ---- the CPU pipelines: conv-phases ---------------------------------------------------------

def _phases_apply(form: dict) -> bool:
    """Whether conv-phases splits `form` (stride 1 and no window dilation where dilated)."""
    ns = len(form["spatial"])
    dims = list(zip(form.get("lhs", [1] * ns), form.get("stride", [1] * ns),
                    form.get("rhs", [1] * ns), strict=True))
    return any(d > 1 for d, _, _ in dims) and all(s == 1 and w == 1 for d, s, w in dims if d > 1)


@pytest.mark.cpu
@pytest.mark.parametrize("name", list(FORMS))
def test_cpu_phases_match_interpreter(name, conv_path, tmp_path):
    """Every form through the CPU pipeline with conv-phases splitting even small ones."""
    spec = pipeline_spec("cpu", 2).replace("conv-phases", "conv-phases{min-macs=0}")
    text = conv_text(FORMS[name])
    (outcome,) = compare_with_interpreter({name: (text, _inputs(text, 6))}, tmp=tmp_path,
                                          rtol=1e-5, atol=1e-5, passes=spec).values()
    compiled = members(outcome.artifact)["module.hlo"].decode()
    assert ("lhs_dilate" not in compiled) == _phases_apply(FORMS[name]), compiled


def _macs(module) -> int:
    total = 0
    for comp in module.computations:
        for i in comp.instructions:
            if i.opcode == Opcode.CONVOLUTION:
                rhs, dn = i.operands[1].shape, i.attrs.conv_dnums
                total += i.shape.num_elements * rhs.dims[dn.kernel_input_feature_dimension] * \
                    math.prod(rhs.dims[d] for d in dn.kernel_spatial_dimensions)
    return total


@pytest.mark.cpu
def test_phases_of_the_cnn_transposed_convolution():
    """d = 2 in two dimensions: four convolutions of the undilated input with 2x2, 2x1, 1x2
    and 1x1 taps of the kernel (strided slices), a quarter of the multiply-adds, interleaved
    by concatenates and reshapes; below min-macs nothing changes."""
    text = conv_text(FORMS["cnn_transposed"])
    module = parse_module(text)
    before = _macs(module)
    assert not ConvPhases().run(module)  # small: left to the native kernel
    assert ConvPhases(min_macs=0).run(module)
    verify(module)
    convs = [i for i in module.entry.instructions if i.opcode == Opcode.CONVOLUTION]
    assert sorted(math.prod(c.operands[1].shape.dims[:2]) for c in convs) == [1, 2, 2, 4]
    assert all(wd.base_dilation == 1 for c in convs for wd in c.attrs.window.dims)
    assert all(s.stride == 2 for c in convs for s in c.operands[1].attrs.slice[:2])
    assert 4 * _macs(module) == before  # 9 taps per 4 outputs instead of 36
    args = _inputs(text, 7)
    want = evaluate(parse_module(text), args).flatten()[0]
    np.testing.assert_allclose(evaluate(module, args).flatten()[0], want, rtol=1e-5, atol=1e-5)
