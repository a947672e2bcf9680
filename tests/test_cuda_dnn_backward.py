"""cuDNN's backward convolutions without a GPU (conv_bwd, ConvCall.direction).

Transposed (lhs-dilated) convolutions become cudnnConvolutionBackwardData and weight-gradient
convolutions cudnnConvolutionBackwardFilter. On `cuda-emulated` with HLOC_CUDA_CONV=cudnn the
descriptors run through host_conv, which computes each call from cuDNN's definition (not from
the HLO), so a wrong padding, mode, stride, dilation, dim order or scratch window shows up
against the reference interpreter; with `kernel` the same split thunks run hloc's kernels.
The libcudnn calls are checked through the fake library of tests/support/fake_cudnn.py.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

from hloc.errors import InputError
from hloc.runtime.cuda import cudnn
from hloc.runtime.cuda.conv_check import filter_format
from hloc.runtime.cuda.driver import CudaError
from hloc.runtime.cuda.host_conv import (
    HostConv,
    backward_data,
    backward_filter,
    convolve,
    unsupported,
)
from hloc.thunks import gpu as gt
from hloc.thunks.serialize import gpu_program_from_json, gpu_program_to_json

from .support.fake_cudnn import HostCudnn, StreamedMemory
from .support.run import emulate_hlo
from .support.values import assert_close
from .trust_support import assert_refused_in_one_line, compile_text, repack

CONV = """HloModule m

ENTRY e {{
  x = {x} parameter(0)
  w = {w} parameter(1)
  ROOT c = {y} convolution(x, w), window={{{window}}}, dim_labels={labels}
}}
"""
# name: (lhs, rhs, result, window, dim_labels, (direction, through scratch, filter)); direction
# None: no cuDNN form, hloc's kernel. filter: (w_format, converted from w_strides first): NHWC
# for NHWC-strided activations (what an H200 supports in backward calls), else NCHW. Compiled
# without passes, so layouts reach the thunk as written.
NHWC, NCHW = ("NHWC", False), ("NCHW", False)
NHWC_CONVERTED, NCHW_CONVERTED = ("NHWC", True), ("NCHW", True)
CASES = {
    # cnn_train_step's conv .14 (jax's input gradient of a stride-2, pad 0_1 convolution):
    # padding 2_1 is asymmetric, so cuDNN writes a 17x17 dx and the epilogue reads 16x16.
    "transposed_cnn": ("f32[2,8,8,6]{3,2,1,0}", "f32[3,3,5,6]{3,2,1,0}",
                       "f32[2,16,16,5]{3,2,1,0}", "size=3x3 pad=2_1x2_1 lhs_dilate=2x2",
                       "b01f_01oi->b01f", ("backward_data", True, NHWC_CONVERTED)),
    "transposed_direct": ("f32[2,3,5,5]{3,2,1,0}", "f32[4,3,3,3]{3,2,1,0}",
                          "f32[2,4,9,9]{3,2,1,0}", "size=3x3 pad=1_1x1_1 lhs_dilate=2x2",
                          "bf01_oi01->bf01", ("backward_data", False, NCHW_CONVERTED)),
    "transposed_reversed_window": ("f32[2,3,5,4]{3,2,1,0}", "f32[4,3,3,2]{3,2,1,0}",
                                   "f32[2,4,10,7]{3,2,1,0}",
                                   "size=3x2 pad=1_2x0_1 lhs_dilate=2x2 rhs_reversal=1x1",
                                   "bf01_oi01->bf01", ("backward_data", False, NCHW_CONVERTED)),
    "transposed_1d_dilated": ("f32[2,5,3]{2,1,0}", "f32[3,3,4]{2,1,0}", "f32[2,14,4]{2,1,0}",
                              "size=3 pad=3_2 lhs_dilate=3 rhs_dilate=2", "b0f_0io->b0f",
                              ("backward_data", True, NHWC_CONVERTED)),
    "transposed_3d": ("f32[1,2,3,3,2]{4,3,2,1,0}", "f32[2,2,2,2,3]{4,3,2,1,0}",
                      "f32[1,4,8,4,3]{4,3,2,1,0}",
                      "size=2x2x2 pad=1_1x1_1x0_0 lhs_dilate=2x3x2",
                      "b012f_012io->b012f", ("backward_data", False, NHWC_CONVERTED)),
    "transposed_nchw_in_memory": ("f32[2,5,5,3]{2,1,3,0}", "f32[3,3,3,4]{3,2,1,0}",
                                  "f32[2,10,10,4]{2,1,3,0}", "size=3x3 pad=1_2x1_2 lhs_dilate=2x2",
                                  "b01f_01io->b01f", ("backward_data", False, NCHW_CONVERTED)),
    # The kernel already packed as cuDNN's NHWC filter (K = its input feature outermost, C =
    # its output feature innermost): read in place, no conversion.
    "transposed_krsc_filter": ("f32[2,8,8,6]{3,2,1,0}", "f32[6,3,3,5]{3,2,1,0}",
                               "f32[2,16,16,5]{3,2,1,0}", "size=3x3 pad=1_2x1_2 lhs_dilate=2x2",
                               "b01f_i01o->b01f", ("backward_data", False, NHWC)),
    # cnn_train_step's weight gradients (dw in jax's HWIO layout: through scratch, packed
    # K, taps, C): conv .11 (pad 1_1), .13 (rhs_dilate 2, pad 0_1: one more tap each side)
    # and .15 (3 input channels).
    "wgrad_cnn_11": ("f32[4,8,8,6]{3,2,1,0}", "f32[4,8,8,5]{3,2,1,0}", "f32[3,3,6,5]{3,2,1,0}",
                     "size=8x8 pad=1_1x1_1", "f01b_i01o->01bf", ("backward_filter", True, NHWC)),
    "wgrad_cnn_13": ("f32[4,16,16,6]{3,2,1,0}", "f32[4,8,8,5]{3,2,1,0}",
                     "f32[3,3,6,5]{3,2,1,0}", "size=8x8 pad=0_1x0_1 rhs_dilate=2x2",
                     "f01b_i01o->01bf", ("backward_filter", True, NHWC)),
    "wgrad_cnn_15": ("f32[4,8,8,3]{3,2,1,0}", "f32[4,8,8,5]{3,2,1,0}", "f32[3,3,3,5]{3,2,1,0}",
                     "size=8x8 pad=1_1x1_1", "f01b_i01o->01bf", ("backward_filter", True, NHWC)),
    # The weight gradient of an rhs-dilated convolution: HLO window stride 2 (cuDNN dilation).
    "wgrad_window_stride": ("f32[2,11,11,3]{3,2,1,0}", "f32[2,7,7,4]{3,2,1,0}",
                            "f32[3,3,3,4]{3,2,1,0}", "size=7x7 stride=2x2", "f01b_i01o->01bf",
                            ("backward_filter", True, NHWC)),
    # dw wanted packed in the format cuDNN writes: the result directly. K, taps, C (OHWI)
    # for jax's NHWC activations; K, C, taps (OIHW) for activations packed NCHW in memory.
    "wgrad_krsc_direct": ("f32[4,8,8,6]{3,2,1,0}", "f32[4,8,8,5]{3,2,1,0}",
                          "f32[5,3,3,6]{3,2,1,0}", "size=8x8 pad=1_1x1_1", "f01b_i01o->f01b",
                          ("backward_filter", False, NHWC)),
    "wgrad_kcrs_direct": ("f32[4,8,8,6]{2,1,3,0}", "f32[4,8,8,5]{2,1,3,0}",
                          "f32[5,6,3,3]{3,2,1,0}", "size=8x8 pad=1_1x1_1", "f01b_i01o->fb01",
                          ("backward_filter", False, NCHW)),
    "wgrad_1d": ("f32[3,20,4]{2,1,0}", "f32[3,18,5]{2,1,0}", "f32[4,4,5]{2,1,0}",
                 "size=18 pad=1_0", "f0b_i0o->0bf", ("backward_filter", True, NHWC)),
    # Not expressible: a window stride with lhs dilation, a kernel reversed in one dim only.
    "transposed_strided": ("f32[1,2,5,5]{3,2,1,0}", "f32[3,2,3,3]{3,2,1,0}",
                           "f32[1,3,5,5]{3,2,1,0}", "size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2",
                           "bf01_oi01->bf01", (None, False, None)),
    "transposed_half_reversed": ("f32[2,3,5,5]{3,2,1,0}", "f32[4,3,3,3]{3,2,1,0}",
                                 "f32[2,4,9,9]{3,2,1,0}",
                                 "size=3x3 pad=1_1x1_1 lhs_dilate=2x2 rhs_reversal=1x0",
                                 "bf01_oi01->bf01", (None, False, None)),
}
QUICK = ("transposed_cnn", "transposed_direct", "wgrad_cnn_13", "wgrad_kcrs_direct")


def _text(case) -> str:
    x, w, y, window, labels = case[:5]
    return CONV.format(x=x, w=w, y=y, window=window, labels=labels)


def _inputs(*types: str, seed=5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dims = [[int(d) for d in t.split("[")[1].split("]")[0].split(",")] for t in types]
    return [rng.standard_normal(d).astype(np.float32) for d in dims]


def _convs(program) -> list[gt.ConvLaunch]:
    return [t for t in program.walk() if isinstance(t, gt.ConvLaunch)]


def _run(name: str, mode: str, monkeypatch, passes=""):
    monkeypatch.setenv("HLOC_CUDA_CONV", mode)
    case = CASES[name]
    inputs = _inputs(case[0], case[1])
    got, want, ex = emulate_hlo(_text(case), inputs, passes=passes)
    return got, want, ex, inputs


# ---- cuDNN's definitions --------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["cross_correlation", "convolution"])
@pytest.mark.parametrize("size,taps,pad,stride,dilation", [
    (9, 3, 1, 2, 1), (10, 3, 0, 2, 2), (8, 2, 1, 1, 1), (11, 3, 2, 3, 2), (7, 1, 0, 2, 1)])
def test_backward_calls_are_the_adjoints_of_forward(mode, size, taps, pad, stride, dilation):
    """<conv(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x, dy)>: the host
    stand-ins are cuDNN's backward calls of the same forward descriptor."""
    y = [cudnn.out_size(s, taps, pad, stride, dilation) for s in (size, size - 1)]
    call = gt.ConvCall(None, None, None, "f32", "f32", (2, 3, size, size - 1), (), (4, 3, taps, taps),
                       "NCHW", (2, 4, *y), (), (pad, pad), (stride, stride),
                       (dilation, dilation), mode=mode)
    rng = np.random.default_rng(0)
    x, w, dy = (rng.standard_normal(d) for d in (call.x_dims, call.w_dims, call.y_dims))
    forward = float((convolve(call, x, w) * dy).sum())
    assert np.isclose(forward, float((x * backward_data(call, dy, w)).sum()))
    assert np.isclose(forward, float((w * backward_filter(call, x, dy)).sum()))


# ---- planning and the emulated calls ----------------------------------------------------------

def _check_plan(name: str, ex) -> gt.ConvLaunch:
    direction, scratch, filt = CASES[name][5]
    (conv,) = _convs(ex.program)
    if direction is None:
        assert conv.dnn is None
        return conv
    assert conv.dnn is not None and conv.dnn.direction == direction
    assert (conv.variant == "conv.core") == scratch
    assert (conv.dnn.w_format, bool(conv.dnn.w_strides)) == filt
    if scratch:
        written = conv.dnn.x if direction == "backward_data" else conv.dnn.w
        assert written == conv.args[-1]
        assert ex.program.allocations[written.allocation].kind == "scratch"
    return conv


@pytest.mark.cpu
@pytest.mark.parametrize("name", CASES)
def test_backward_convolutions_on_host_conv(name, monkeypatch):
    got, want, ex, _ = _run(name, "cudnn", monkeypatch)
    conv = _check_plan(name, ex)
    assert ex.runner.dnn_calls == (conv.dnn is not None)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
@pytest.mark.parametrize("name", QUICK)
def test_backward_plans_run_hloc_kernels_too(name, monkeypatch):
    """HLOC_CUDA_CONV=kernel: the same thunks (the core kernel writes the scratch window
    cuDNN would) and no cuDNN call."""
    got, want, ex, _ = _run(name, "kernel", monkeypatch)
    _check_plan(name, ex)
    assert ex.runner.dnn_calls == 0
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
@pytest.mark.parametrize("name,change", [
    ("transposed_cnn", lambda c: dict(mode="cross_correlation")),
    ("transposed_cnn", lambda c: dict(y_strides=(*c.y_strides[:2], c.y_strides[3],
                                                 c.y_strides[2]))),
    ("wgrad_cnn_13", lambda c: dict(x_strides=(*c.x_strides[:2], c.x_strides[3],
                                              c.x_strides[2]))),
    ("wgrad_cnn_11", lambda c: dict(mode="convolution")),
    ("wgrad_kcrs_direct", lambda c: dict(w_format="NHWC")),  # dw written K, taps, C
])
def test_a_wrong_backward_descriptor_fails_the_comparison(name, change, monkeypatch):
    got, want, ex, inputs = _run(name, "cudnn", monkeypatch)
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    (conv,) = _convs(ex.program)
    engine = ex.runner.dnn
    altered = dataclasses.replace(conv.dnn, **change(conv.dnn))

    class Altered:
        def runs(self, name):
            return True

        def __call__(self, call, name):
            engine(altered, name)

    ex.runner.dnn = Altered()
    try:
        wrong = ex.run(inputs)
    except InputError:
        return  # refused as inconsistent: as good as a wrong result
    assert not np.allclose(wrong[0], want[0], rtol=1e-3, atol=1e-3)


def test_filter_format_follows_the_activations():
    """NHWC filters for backward calls whose x or dy keeps its features innermost (one
    feature is no layout); forward calls keep NCHW filters with any activations."""
    nhwc, nchw = ((2, 3, 5, 5), (75, 1, 15, 3)), ((2, 3, 5, 5), (75, 25, 5, 1))
    one_feature = ((2, 1, 5, 5), (25, 1, 5, 1))
    assert filter_format("forward", nhwc, nhwc) == "NCHW"
    assert filter_format("backward_data", nhwc, nhwc) == "NHWC"
    assert filter_format("backward_filter", nchw, nhwc) == "NHWC"
    assert filter_format("backward_filter", nchw, nchw) == "NCHW"
    assert filter_format("backward_data", one_feature, nchw) == "NCHW"


def _with_filter(program, w_format: str):
    """The program with every cuDNN descriptor's filter format set to `w_format`."""
    def alter(t):
        if isinstance(t, gt.Sequential):
            return dataclasses.replace(t, thunks=tuple(alter(c) for c in t.thunks))
        if isinstance(t, gt.ConvLaunch) and t.dnn is not None:
            return dataclasses.replace(t, dnn=dataclasses.replace(t.dnn, w_format=w_format))
        return t

    return dataclasses.replace(program, main=tuple(alter(t) for t in program.main))


@pytest.mark.cpu
@pytest.mark.parametrize("name", ["transposed_cnn", "transposed_krsc_filter", "wgrad_cnn_13",
                                  "wgrad_krsc_direct"])
def test_nchw_filter_with_nhwc_activations_is_refused_as_on_an_h200(name, monkeypatch,
                                                                      caplog):
    """The emulator keeps the H200's rule: a backward call with NHWC-strided activations and
    an NCHW filter (what hloc described before) has no algorithm. host_conv refuses it at
    setup (hloc's kernel runs it, one warning) and fails a call as cuDNN would; the fake
    libcudnn's heuristic answers NOT_SUPPORTED, so the cuDNN engine refuses it too."""
    _, want, ex, inputs = _run(name, "cudnn", monkeypatch)
    assert ex.runner.dnn_calls == 1  # hloc's own descriptor (NHWC filter) runs
    old = _with_filter(ex.program, "NCHW")
    (conv,) = _convs(old)
    assert unsupported(conv.dnn) is not None
    cudnn._warned.clear()
    with caplog.at_level(logging.WARNING, logger="hloc.runtime.cuda.cudnn"):
        engine = HostConv(ex.memory, old)
        fake_engine = cudnn.CudnnConv(StreamedMemory(ex.memory), old, lib=HostCudnn(ex.memory))
    assert not engine.runs(conv.name) and not fake_engine.plans
    assert "status 3000" in caplog.text and "no supported deterministic algorithm" in caplog.text
    ex.runner.dnn, ex.runner.dnn_calls = engine, 0
    assert_close(ex.run(inputs), want, rtol=1e-5, atol=1e-5)
    assert ex.runner.dnn_calls == 0
    with pytest.raises(CudaError, match="status 3000"):
        engine(conv.dnn, conv.name)


FUSED = {
    # A training step's weight update, SGD on the weight gradient (cnn_train_step's fusion.5).
    "wgrad_sgd": ("""HloModule m

ENTRY e {
  x = f32[4,16,16,6]{3,2,1,0} parameter(0)
  dy = f32[4,8,8,5]{3,2,1,0} parameter(1)
  w = f32[3,3,6,5]{3,2,1,0} parameter(2)
  g = f32[3,3,6,5]{3,2,1,0} convolution(x, dy), window={size=8x8 pad=0_1x0_1 rhs_dilate=2x2}, dim_labels=f01b_i01o->01bf
  lr = f32[] constant(0.05)
  lrb = f32[3,3,6,5]{3,2,1,0} broadcast(lr), dimensions={}
  m = f32[3,3,6,5]{3,2,1,0} multiply(g, lrb)
  ROOT r = f32[3,3,6,5]{3,2,1,0} subtract(w, m)
}
""", "backward_filter"),
    # The input gradient through a ReLU mask (cnn_train_step's fusion.8).
    "transposed_relu_mask": ("""HloModule m

ENTRY e {
  dy = f32[2,8,8,6]{3,2,1,0} parameter(0)
  k = f32[3,3,5,6]{3,2,1,0} parameter(1)
  a = f32[2,16,16,5]{3,2,1,0} parameter(2)
  c = f32[2,16,16,5]{3,2,1,0} convolution(dy, k), window={size=3x3 pad=2_1x2_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f
  zero = f32[] constant(0)
  z = f32[2,16,16,5]{3,2,1,0} broadcast(zero), dimensions={}
  gt = pred[2,16,16,5]{3,2,1,0} compare(a, z), direction=GT
  ROOT r = f32[2,16,16,5]{3,2,1,0} select(gt, c, z)
}
""", "backward_data"),
}


def _fused_inputs(text: str) -> list[np.ndarray]:
    return _inputs(*[line.split("=")[1].split()[0] for line in text.splitlines()
                     if "parameter(" in line], seed=9)


@pytest.mark.cpu
@pytest.mark.parametrize("mode", ["cudnn", "kernel"])
@pytest.mark.parametrize("name", FUSED)
def test_fused_gradients_split_into_backward_call_and_epilogue(name, mode, monkeypatch):
    monkeypatch.setenv("HLOC_CUDA_CONV", mode)
    text, direction = FUSED[name]
    got, want, ex = emulate_hlo(text, _fused_inputs(text))
    (split,) = [t for t in ex.program.main if isinstance(t, gt.Sequential)]
    core, epilogue = split.thunks
    assert (core.variant, epilogue.variant) == ("conv.core", "conv.epilogue")
    assert core.dnn.direction == direction and ex.runner.dnn_calls == (mode == "cudnn")
    assert_close(got, want, rtol=1e-5, atol=1e-5)


REV_IN_FUSION = """HloModule m

fused {
  dy = f32[2,8,8,6]{3,2,1,0} parameter(0)
  k = f32[3,3,5,6]{3,2,1,0} parameter(1)
  r = f32[3,3,5,6]{3,2,1,0} reverse(k), dimensions={0,1}
  ROOT c = f32[2,16,16,5]{3,2,1,0} convolution(dy, r), window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f
}

ENTRY e {
  dy = f32[2,8,8,6]{3,2,1,0} parameter(0)
  k = f32[3,3,5,6]{3,2,1,0} parameter(1)
  ROOT f = f32[2,16,16,5]{3,2,1,0} fusion(dy, k), kind=kOutput, calls=fused
}
"""


@pytest.mark.cpu
@pytest.mark.parametrize("mode", ["cudnn", "kernel"])
def test_reversed_kernel_inside_the_fusion_is_read_unreversed(mode, monkeypatch):
    """jax's input gradient convolves with rev(w): inside the fusion the reverse is read
    through (the parameter itself, CUDNN_CROSS_CORRELATION instead of CUDNN_CONVOLUTION)."""
    monkeypatch.setenv("HLOC_CUDA_CONV", mode)
    inputs = _inputs("f32[2,8,8,6]", "f32[3,3,5,6]")
    got, want, ex = emulate_hlo(REV_IN_FUSION, inputs, passes="")
    (conv,) = _convs(ex.program)
    assert conv.dnn.direction == "backward_data" and conv.dnn.mode == "cross_correlation"
    assert ex.runner.dnn_calls == (mode == "cudnn")
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
def test_long_weight_gradient_sums_keep_shared_threads_in_the_core_kernel(tmp_path):
    """A weight gradient with long sums (cnn_train_step's conv .11): its core kernel, which
    runs under HLOC_CUDA_CONV=kernel, still shares each output among threads (conv_split's
    group or tile mode), as the conv.split kernel did before cuDNN could take it."""
    from hloc.bundle import read_bundle

    text = CONV.format(x="f32[32,16,16,32]{3,2,1,0}", w="f32[32,16,16,32]{3,2,1,0}",
                       y="f32[3,3,32,32]{3,2,1,0}", window="size=16x16 pad=1_1x1_1",
                       labels="f01b_i01o->01bf")
    path = compile_text(tmp_path, text, "conv", target="cuda", passes="")
    program, _ = gpu_program_from_json(bytes(read_bundle(str(path)).members["gpu_thunks.json"]))
    (conv,) = _convs(program)
    assert conv.dnn.direction == "backward_filter"
    recipe = next(r for r in program.kernels if r.name == conv.kernel)
    assert recipe.variant == "conv.core" and {k for k, _ in recipe.params} & {"group", "slices"}


# ---- the libcudnn calls, through the fake library -------------------------------------------------

@pytest.mark.cpu
@pytest.mark.parametrize("name", ["transposed_cnn", "transposed_direct", "transposed_krsc_filter",
                                  "wgrad_cnn_13", "wgrad_krsc_direct", "wgrad_kcrs_direct"])
def test_backward_arguments_through_a_host_cudnn(name, monkeypatch):
    """Each call's filter descriptor in its format, the filter converted into it first when
    strided (cudnnTransformTensor), ALGO_1 chosen, the result the interpreter's."""
    got, want, ex, inputs = _run(name, "kernel", monkeypatch)
    fake = HostCudnn(ex.memory)
    engine = cudnn.CudnnConv(StreamedMemory(ex.memory), ex.program, lib=fake)
    (conv,) = _convs(ex.program)
    assert engine.runs(conv.name) and engine.plans[conv.name].algo == 1  # deterministic ALGO_1
    (filt,) = [d for d in fake.descs.values() if d["kind"] == "filter"]
    assert filt["format"] == cudnn.CUDNN_TENSOR_FORMAT[conv.dnn.w_format]
    ex.runner.dnn = engine
    got = ex.run(inputs)
    assert fake.calls == 1 and ex.runner.dnn_calls == 1
    assert fake.transforms == bool(conv.dnn.w_strides)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
def test_auto_mode_gives_backward_calls_to_cudnn_only_where_it_measured_faster(monkeypatch):
    """HLOC_CUDA_CONV=auto: deterministic (the default) keeps every backward call on hloc's
    kernels; HLOC_CUDA_DETERMINISTIC=0 gives weight gradients to cuDNN with its first
    supported algorithm, determinism aside (the fake's heuristic lists ALGO_3 before ALGO_1),
    the result still the interpreter's."""
    got, want, ex, inputs = _run("wgrad_cnn_11", "kernel", monkeypatch)
    (conv,) = _convs(ex.program)
    memory = StreamedMemory(ex.memory)
    kept = cudnn.CudnnConv(memory, ex.program, lib=HostCudnn(ex.memory), auto=True)
    assert not kept.plans
    lib = HostCudnn(ex.memory)
    lib.backward_algo = 3
    fast = cudnn.CudnnConv(memory, ex.program, lib=lib, auto=True, only_deterministic=False)
    assert fast.runs(conv.name) and fast.plans[conv.name].algo == 3
    ex.runner.dnn = fast
    assert_close(ex.run(inputs), want, rtol=1e-5, atol=1e-5)
    assert ex.runner.dnn_calls == 1
    transposed = dataclasses.replace(conv.dnn, direction="backward_data")
    assert not cudnn.runs_in_auto(transposed, only_deterministic=False)  # NHWC: slower there
    assert cudnn.runs_in_auto(dataclasses.replace(transposed, w_format="NCHW"), False)


@pytest.mark.cpu
@pytest.mark.parametrize("value,allowed", [("1", True), ("0", False), (" 0 ", False)])
def test_determinism_switch(value, allowed):
    assert cudnn.deterministic({"HLOC_CUDA_DETERMINISTIC": value}) is allowed
    assert cudnn.deterministic({}) is True


@pytest.mark.cpu
def test_determinism_switch_refuses_other_values():
    with pytest.raises(InputError, match="HLOC_CUDA_DETERMINISTIC='yes': expected 0 or 1"):
        cudnn.deterministic({"HLOC_CUDA_DETERMINISTIC": "yes"})


@pytest.mark.cpu
def test_a_library_without_backward_calls_keeps_the_kernel(monkeypatch, caplog):
    got, want, ex, inputs = _run("wgrad_cnn_11", "kernel", monkeypatch)
    class Older(HostCudnn):  # a libcudnn with the forward call only
        def fn(self, name):
            if "Backward" in name:
                raise AttributeError(name)
            return super().fn(name)

    fake = Older(ex.memory)
    cudnn._warned.clear()
    engine = cudnn.CudnnConv(StreamedMemory(ex.memory), ex.program, lib=fake)
    assert not engine.plans
    ex.runner.dnn = engine
    assert_close(ex.run(inputs), want, rtol=1e-5, atol=1e-5)
    assert fake.calls == 0


# ---- descriptors in bundles ---------------------------------------------------------------------

@pytest.mark.cpu
def test_backward_descriptor_fields_are_checked(monkeypatch):
    _, _, ex, _ = _run("wgrad_kcrs_direct", "cudnn", monkeypatch)
    call = _convs(ex.program)[0].dnn
    for bad in (dict(direction="sideways"), dict(mode="flipped"), dict(groups=2),
                dict(w_strides=(54, 9, 3, 1)), dict(direction=1)):
        with pytest.raises(InputError, match="cuDNN descriptor"):
            ex.runner.dnn(dataclasses.replace(call, **bad), "c")


@pytest.mark.cpu
def test_gpu_thunks_version_2_round_trip_and_version_1_still_read(monkeypatch):
    _, _, ex, _ = _run("transposed_direct", "kernel", monkeypatch)
    data = gpu_program_to_json(ex.program)
    back, _ = gpu_program_from_json(data)
    assert back == ex.program and _convs(back)[0].dnn.mode == "convolution"
    doc = json.loads(data)
    assert doc["gpu_thunks_version"] == 2
    doc["gpu_thunks_version"] = 1
    for thunk in doc["main"]:
        if thunk.get("dnn"):
            del thunk["dnn"]["direction"], thunk["dnn"]["mode"]
    old, _ = gpu_program_from_json(json.dumps(doc))
    assert _convs(old)[0].dnn.direction == "forward"  # what version 1 meant


@pytest.mark.cpu
@pytest.mark.parametrize("field,value", [("direction", "backward_bias"), ("mode", "mirror"),
                                         ("groups", 2)])
def test_tampered_backward_descriptor_is_refused_in_one_line(field, value, tmp_path):
    from hloc.runtime import load

    path = compile_text(tmp_path, _text(CASES["wgrad_kcrs_direct"]), "conv", target="cuda",
                        passes="")
    assert load(str(path), "cuda-emulated") is not None

    def edit(doc):
        (thunk,) = [t for t in doc["main"] if t["kind"] == "convolution"]
        assert thunk["dnn"]["direction"] == "backward_filter"
        thunk["dnn"][field] = value

    line = assert_refused_in_one_line(
        repack(path, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": edit}),
        "cuDNN descriptor")
    assert "cuDNN descriptor" in line


@pytest.mark.cpu
def test_inspect_shows_the_direction(tmp_path):
    from click.testing import CliRunner

    from hloc.cli.main import cli

    path = compile_text(tmp_path, _text(CASES["transposed_cnn"]), "conv", target="cuda",
                        passes="")
    result = CliRunner().invoke(cli, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    assert "cudnn[backward_data reversed x=2x5x17x17" in result.output
    assert "w=6x5x3x3/1x6x90x30->NHWC y=" in result.output  # HWIO converted to K, taps, C


# ---- the whole training step, and on a real GPU ------------------------------------------------

@pytest.mark.cpu
@pytest.mark.slow  # a 20 s compile and a 5 s emulated run on two loaded cores
def test_cnn_train_step_with_backward_calls_on_host_conv(tmp_path, monkeypatch):
    """cnn_train_step under cuda-emulated with HLOC_CUDA_CONV=cudnn: its input gradient runs
    as backward data, its three weight gradients as backward filter (through scratch), and
    every output matches XLA's."""
    from hloc.bundle import read_bundle
    from hloc.runtime.cuda.emulated import CudaEmulatedExecutable

    from .support.bundles import compile_bundle
    from .test_model_samples import MODELS, weights

    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    path = compile_bundle(MODELS / "cnn_train_step.pb", tmp_path / "m.bundle", target="cuda",
                          cuda_archs=("sm_80",))
    ex = CudaEmulatedExecutable(read_bundle(str(path)))
    calls = [c.dnn for c in _convs(ex.program) if c.dnn is not None]
    assert sorted(c.direction for c in calls) == [
        "backward_data", "backward_filter", "backward_filter", "backward_filter", "forward",
        "forward", "forward"]
    # jax's NHWC activations: every backward call with the NHWC filter an H200 accepts.
    assert {c.w_format for c in calls if c.direction != "forward"} == {"NHWC"}
    meta = weights.meta("cnn_train_step")
    got = ex.run(weights.arrays(meta))
    assert ex.runner.dnn_calls == len(calls)
    tol = meta["tolerance"]
    for g, e in zip(got, weights.expected("cnn_train_step"), strict=True):
        assert np.allclose(g, e, rtol=tol["rtol"], atol=tol["atol"])


def _cudnn_on_gpu() -> None:
    from .test_cuda_dnn import _cudnn_on_gpu as check

    check()


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][5][0] is not None])
def test_backward_convolutions_through_cudnn_on_gpu(name, tmp_path, monkeypatch):
    """Each backward form through real cuDNN (full f32, deterministic algorithms), with the
    filter format its activations call for (NHWC ones and NCHW ones, filters converted or
    read in place): cuDNN set it up (none refused), ran it once, matches the interpreter,
    and runs to the same bits."""
    from hloc.runtime import load

    from .support.run import interpret

    _cudnn_on_gpu()
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")
    monkeypatch.delenv("HLOC_CUDA_TF32", raising=False)
    case = CASES[name]
    path = compile_text(tmp_path, _text(case), "conv", target="cuda", passes="",
                        cuda_archs=("sm_80", "sm_90"))
    exe = load(str(path), "cuda")
    inputs = _inputs(case[0], case[1])
    got = exe.run(inputs)
    conv = _check_plan(name, exe)
    assert sorted(exe.runner.dnn.plans) == [conv.name] and exe.runner.dnn_calls == 1
    assert_close([np.asarray(g) for g in got], interpret(_text(case), inputs), rtol=1e-5,
                 atol=1e-5)
    again = exe.run(inputs)
    assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
               for a, b in zip(got, again, strict=True))


@pytest.mark.gpu
@pytest.mark.parametrize("name", FUSED)
def test_fused_gradients_through_cudnn_on_gpu(name, tmp_path, monkeypatch):
    """A fused gradient (SGD update, ReLU mask) on a GPU: the backward call into scratch, the
    epilogue reading it, none refused, the interpreter's result."""
    from .test_cuda_dnn import fused_through_cudnn_on_gpu

    text = FUSED[name][0]
    fused_through_cudnn_on_gpu(text, _fused_inputs(text), tmp_path, monkeypatch)
