"""HLOC_CUDA_CONV=cudnn without a GPU.

Convolution thunks of plain convolutions carry a cuDNN descriptor (hloc.thunks.gpu.ConvCall).
On `cuda-emulated` the descriptor runs on the host under cuDNN's contract
(hloc.runtime.cuda.host_conv), so its dims, strides, filter format, padding, window strides,
dilation and groups are checked against the reference interpreter (layout cases, samples).
The libcudnn loader and the cuDNN argument marshalling are tested with fakes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging

import numpy as np
import pytest

from hloc.errors import InputError
from hloc.runtime.cuda import cudnn
from hloc.runtime.cuda.driver import CudaError
from hloc.runtime.cuda.emulated import CudaEmulatedExecutable
from hloc.thunks import gpu as gt
from hloc.thunks.serialize import gpu_program_from_json, gpu_program_to_json

from .conftest import SAMPLES, sample_arrays
from .support.fake_cudnn import HostCudnn as _HostCudnn
from .support.fake_cudnn import StreamedMemory as _StreamedMemory
from .support.run import emulate_hlo
from .support.values import assert_close
from .test_cuda_samples import _bundle, _problems
from .trust_support import compile_text, repack

CONV = """HloModule m

ENTRY e {{
  x = {x} parameter(0)
  w = {w} parameter(1)
  ROOT c = {y} convolution(x, w), window={{{window}}}, dim_labels={labels}{extra}
}}
"""
# name: (x, w, y, window, dim_labels, extra attributes, (filter converted, padding, groups)
# expected). Compiled with no passes, so the layouts reach the convolution thunk as written.
# Every filter that is not packed K, C, spatial is converted (w_strides) before convolving.
LAYOUTS = {
    "nchw": ("f32[2,3,9,8]{3,2,1,0}", "f32[4,3,3,3]{3,2,1,0}", "f32[2,4,9,8]{3,2,1,0}",
             "size=3x3 pad=1_1x1_1", "bf01_oi01->bf01", "", (False, (1, 1), 1)),
    "nhwc_ohwi": ("f32[2,9,8,3]{3,2,1,0}", "f32[4,3,3,3]{3,2,1,0}", "f32[2,9,8,4]{3,2,1,0}",
                  "size=3x3 pad=1_1x1_1", "b01f_o01i->b01f", "", (True, (1, 1), 1)),
    "hwio_filter": ("f32[2,9,8,3]{3,2,1,0}", "f32[3,3,3,4]{3,2,1,0}", "f32[2,9,8,4]{3,2,1,0}",
                    "size=3x3 pad=1_1x1_1", "b01f_01io->b01f", "", (True, (1, 1), 1)),
    "hwio_strided_1x1": ("f32[2,9,8,5]{3,2,1,0}", "f32[1,1,5,6]{3,2,1,0}",
                         "f32[2,5,4,6]{3,2,1,0}", "size=1x1 stride=2x2", "b01f_01io->b01f", "",
                         (True, (0, 0), 1)),
    "x_and_y_nhwc_in_memory": ("f32[2,3,9,8]{1,3,2,0}", "f32[4,3,3,2]{3,2,1,0}",
                               "f32[2,4,7,7]{1,3,2,0}", "size=3x2", "bf01_oi01->bf01", "",
                               (False, (0, 0), 1)),
    "filter_ohwi_layout": ("f32[2,3,9,8]{3,2,1,0}", "f32[4,3,3,2]{1,3,2,0}",
                           "f32[2,4,7,7]{3,2,1,0}", "size=3x2", "bf01_oi01->bf01", "",
                           (True, (0, 0), 1)),
    "grouped": ("f32[2,4,7,7]{3,2,1,0}", "f32[6,2,3,3]{3,2,1,0}", "f32[2,6,7,7]{3,2,1,0}",
                "size=3x3 pad=1_1x1_1", "bf01_oi01->bf01", ", feature_group_count=2",
                (False, (1, 1), 2)),
    "depthwise": ("f32[2,9,8,4]{3,2,1,0}", "f32[8,3,3,1]{3,2,1,0}", "f32[2,9,8,8]{3,2,1,0}",
                  "size=3x3 pad=1_1x1_1", "b01f_o01i->b01f", ", feature_group_count=4",
                  (False, (1, 1), 4)),  # one input feature per group: both formats
    "strided_dilated": ("f32[2,3,11,9]{3,2,1,0}", "f32[4,3,3,2]{3,2,1,0}",
                        "f32[2,4,6,9]{3,2,1,0}", "size=3x2 stride=2x1 pad=2_2x1_1 rhs_dilate=2x2",
                        "bf01_oi01->bf01", "", (False, (2, 1), 1)),
    # Padding 1 low, 0 high, stride 2 over 8: cuDNN's symmetric 1 gives the same 4 outputs.
    "asymmetric_same_size": ("f32[1,2,8,8]{3,2,1,0}", "f32[3,2,3,3]{3,2,1,0}",
                             "f32[1,3,4,4]{3,2,1,0}", "size=3x3 stride=2x2 pad=1_0x1_0",
                             "bf01_oi01->bf01", "", (False, (1, 1), 1)),
    "one_d": ("f32[3,4,17]{2,1,0}", "f32[5,4,3]{2,1,0}", "f32[3,5,9]{2,1,0}",
              "size=3 stride=2 pad=1_1", "bf0_oi0->bf0", "", (False, (0, 1), 1)),
    "one_d_wio": ("f32[3,17,4]{2,1,0}", "f32[3,4,5]{2,1,0}", "f32[3,9,5]{2,1,0}",
                  "size=3 stride=2 pad=1_1", "b0f_0io->b0f", "", (True, (0, 1), 1)),
    "three_d_dhwio": ("f32[1,5,6,7,2]{4,3,2,1,0}", "f32[2,3,2,2,3]{4,3,2,1,0}",
                      "f32[1,4,2,6,3]{4,3,2,1,0}", "size=2x3x2 stride=1x2x1",
                      "b012f_012io->b012f", "", (True, (0, 0, 0), 1)),
    "three_d": ("f32[1,2,5,6,7]{4,3,2,1,0}", "f32[3,2,2,3,2]{4,3,2,1,0}",
                "f32[1,3,4,2,6]{4,3,2,1,0}", "size=2x3x2 stride=1x2x1",
                "bf012_oi012->bf012", "", (False, (0, 0, 0), 1)),
    "f16": ("f16[2,3,9,8]{3,2,1,0}", "f16[4,3,3,3]{3,2,1,0}", "f16[2,4,9,8]{3,2,1,0}",
            "size=3x3 pad=1_1x1_1", "bf01_oi01->bf01", "", (False, (1, 1), 1)),
}
# Convolutions cuDNN's legacy descriptors cannot express: hloc's kernel, no descriptor.
# (lhs-dilated ones are backward-data calls now: tests/test_cuda_dnn_backward.py.)
NO_DESCRIPTOR = {
    "batch_groups": ("f32[4,3,7,7]{3,2,1,0}", "f32[6,3,3,3]{3,2,1,0}", "f32[2,6,5,5]{3,2,1,0}",
                     "size=3x3", "bf01_oi01->bf01", ", batch_group_count=2"),
    "asymmetric": ("f32[1,2,8,8]{3,2,1,0}", "f32[3,2,3,3]{3,2,1,0}", "f32[1,3,4,4]{3,2,1,0}",
                   "size=3x3 stride=2x2 pad=0_1x0_1", "bf01_oi01->bf01", ""),
    "negative_padding": ("f32[2,3,9,8]{3,2,1,0}", "f32[4,3,3,2]{3,2,1,0}",
                         "f32[2,4,8,7]{3,2,1,0}", "size=3x2 pad=-1_2x1_-1", "bf01_oi01->bf01", ""),
    "reversed": ("f32[2,3,9,8]{3,2,1,0}", "f32[4,3,3,2]{3,2,1,0}", "f32[2,4,7,7]{3,2,1,0}",
                 "size=3x2 rhs_reversal=1x0", "bf01_oi01->bf01", ""),
}
TOLERANCE = {"f32": (1e-5, 1e-5), "f16": (1e-2, 1e-2)}


def _text(case) -> str:
    x, w, y, window, labels, extra = case[:6]
    return CONV.format(x=x, w=w, y=y, window=window, labels=labels, extra=extra)


def _array(text: str, rng) -> np.ndarray:
    dtype, dims = text.split("[")[0], text.split("[")[1].split("]")[0].split(",")
    return rng.standard_normal([int(d) for d in dims]).astype({"f32": np.float32,
                                                               "f16": np.float16}[dtype])


def _inputs(case, seed=7):
    rng = np.random.default_rng(seed)
    return [_array(case[0], rng), _array(case[1], rng)]


def _convs(program) -> list[gt.ConvLaunch]:
    return [t for t in program.walk() if isinstance(t, gt.ConvLaunch)]


@pytest.mark.cpu
@pytest.mark.parametrize("name", LAYOUTS)
def test_descriptor_layouts_on_host_conv(name, monkeypatch):
    case = LAYOUTS[name]
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    got, want, ex = emulate_hlo(_text(case), _inputs(case), passes="")
    (conv,) = _convs(ex.program)
    assert conv.dnn is not None
    assert conv.dnn.w_format == "NCHW"
    assert (bool(conv.dnn.w_strides), conv.dnn.padding, conv.dnn.groups) == case[6]
    assert ex.runner.dnn_calls == 1
    rtol, atol = TOLERANCE[case[2].split("[")[0]]
    assert_close(got, want, rtol=rtol, atol=atol)


@pytest.mark.cpu
@pytest.mark.parametrize("name", NO_DESCRIPTOR)
def test_unexpressible_convolutions_keep_the_kernel(name, monkeypatch):
    case = NO_DESCRIPTOR[name]
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    got, want, ex = emulate_hlo(_text(case), _inputs(case), passes="")
    assert [c.dnn for c in _convs(ex.program)] == [None]
    assert ex.runner.dnn_calls == 0
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
def test_fused_epilogue_is_split_and_kernel_is_the_default(monkeypatch):
    text = """HloModule m

ENTRY e {
  x = f32[2,3,9,8]{3,2,1,0} parameter(0)
  w = f32[4,3,3,3]{3,2,1,0} parameter(1)
  b = f32[4] parameter(2)
  c = f32[2,4,9,8]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
  bb = f32[2,4,9,8]{3,2,1,0} broadcast(b), dimensions={1}
  ROOT r = f32[2,4,9,8]{3,2,1,0} add(c, bb)
}
"""
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    case = LAYOUTS["nchw"]
    bias = np.linspace(-1, 1, 4, dtype=np.float32)
    got, want, ex = emulate_hlo(text, [*_inputs(case), bias])
    (conv,) = _convs(ex.program)
    assert conv.variant == "conv.core" and not conv.dnn.w_strides and ex.runner.dnn_calls == 1
    assert_close(got, want, atol=1e-5)
    monkeypatch.delenv("HLOC_CUDA_CONV")
    got, want, ex = emulate_hlo(_text(case), _inputs(case))
    assert [c.dnn is not None for c in _convs(ex.program)] == [True]
    assert ex.runner.dnn is None and ex.runner.dnn_calls == 0  # the kernel unless asked for
    assert_close(got, want, atol=1e-5)


class _Altered:
    """A DNN engine that runs every descriptor with some fields changed."""

    def __init__(self, engine, **changes):
        self.engine, self.changes = engine, changes

    def runs(self, name):
        return True

    def __call__(self, call, name):
        self.engine(dataclasses.replace(call, **self.changes), name)


@pytest.mark.cpu
@pytest.mark.parametrize("change", [
    lambda c: dict(x_strides=(*c.x_strides[:2], c.x_strides[3], c.x_strides[2])),
    lambda c: dict(y_strides=(c.y_strides[0], c.y_strides[1], c.y_strides[3], c.y_strides[2])),
    lambda c: dict(w_format="NHWC")])
def test_a_wrong_descriptor_fails_the_comparison(change, monkeypatch):
    case = LAYOUTS["nchw"]
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    inputs = _inputs(case)
    _, want, ex = emulate_hlo(_text(case), inputs, passes="")
    call = _convs(ex.program)[0].dnn
    ex.runner.dnn = _Altered(ex.runner.dnn, **change(call))
    got = ex.run(inputs)
    assert not np.allclose(got[0], want[0], rtol=1e-3, atol=1e-3)


@pytest.mark.cpu
@pytest.mark.parametrize("name,a,b", [("hwio_filter", 2, 3), ("three_d_dhwio", 2, 4)])
def test_a_wrong_filter_stride_fails_the_comparison(name, a, b, monkeypatch):
    """The filter conversion reads through w_strides: two spatial strides swapped (dims of
    the same size, so the slice still holds it) reads other taps."""
    case = LAYOUTS[name]
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    inputs = _inputs(case)
    got, want, ex = emulate_hlo(_text(case), inputs, passes="")
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    steps = _convs(ex.program)[0].dnn.w_strides
    wrong = list(steps)
    wrong[a], wrong[b] = steps[b], steps[a]
    ex.runner.dnn = _Altered(ex.runner.dnn, w_strides=tuple(wrong))
    assert not np.allclose(ex.run(inputs)[0], want[0], rtol=1e-3, atol=1e-3)


@pytest.mark.cpu
def test_descriptor_outside_its_slice_or_inconsistent_is_refused(monkeypatch):
    case = LAYOUTS["nchw"]
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    _, _, ex = emulate_hlo(_text(case), _inputs(case), passes="")
    call = _convs(ex.program)[0].dnn
    for bad in (dict(y_strides=(call.y_strides[0] + 1, *call.y_strides[1:])),
                dict(x_dims=(3, *call.x_dims[1:])), dict(groups=2), dict(padding=(2, 1)),
                dict(window_strides=(2, 1)), dict(w_format="CHWN"), dict(dtype="s32"),
                dict(w_dims=(4, 3, 3)), dict(dilation=(0, 1)), dict(x_strides=(1.5, 1, 1, 1)),
                dict(w_strides=(27, 9, 3)), dict(w_strides=(27, 9, 3, 0)),
                dict(w_strides=(28, 9, 3, 1)), dict(w_strides=(27, 9, 3, 1), w_format="NHWC")):
        with pytest.raises(InputError, match="cuDNN descriptor"):
            ex.runner.dnn(dataclasses.replace(call, **bad), "c")


@pytest.mark.cpu
def test_descriptor_json_round_trip_and_tampered_bundle(tmp_path, monkeypatch):
    monkeypatch.delenv("HLOC_CUDA_CONV", raising=False)
    case = LAYOUTS["grouped"]
    _, _, ex = emulate_hlo(_text(case), _inputs(case), passes="")
    back, _ = gpu_program_from_json(gpu_program_to_json(ex.program))
    assert back == ex.program and _convs(back)[0].dnn is not None
    path = compile_text(tmp_path, _text(case), "conv", target="cuda")

    def widen(doc):
        thunk = next(t for t in doc["main"] if t["kind"] == "convolution")
        thunk["dnn"]["y_dims"][0] = 4

    bad = repack(path, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": widen})
    from hloc.runtime import load

    with pytest.raises(InputError, match="cuDNN descriptor"):
        load(str(bad), "cuda-emulated")
    assert load(str(path), "cuda-emulated") is not None


def test_conv_env_values(monkeypatch):
    assert cudnn.conv_mode({}) == "auto" and cudnn.use_cudnn({}) is False
    assert cudnn.use_cudnn({"HLOC_CUDA_CONV": "cuDNN"}) is True
    assert cudnn.conv_mode({"HLOC_CUDA_CONV": " kernel "}) == "kernel"
    with pytest.raises(InputError, match="HLOC_CUDA_CONV"):
        cudnn.conv_mode({"HLOC_CUDA_CONV": "miopen"})


def test_select_conv_falls_back_with_one_warning(caplog):
    def broken():
        raise CudaError("libcudnn was not found")

    made = []
    assert cudnn.select_conv("kernel", True, lambda: made.append(1)) is None
    assert cudnn.select_conv("auto", False, lambda: made.append(1)) is None and not made
    cudnn._warned.clear()
    with caplog.at_level(logging.WARNING, logger="hloc.runtime.cuda.cudnn"):
        assert cudnn.select_conv("auto", True, broken) is None
        assert cudnn.select_conv("auto", True, broken) is None
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    with pytest.raises(CudaError):
        cudnn.select_conv("cudnn", True, broken)


def test_math_types_follow_xla_tf32_rule():
    from hloc.ir.attrs import PrecisionConfig

    call = gt.ConvCall(gt.Slice(0, 0, 4), gt.Slice(0, 0, 4), gt.Slice(0, 0, 4), "f32", "f32",
                       (1, 1, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1), "NCHW", (1, 1, 1, 1),
                       (1, 1, 1, 1), (0, 0), (1, 1), (1, 1))
    highest = PrecisionConfig(operand_precision=(2, 2))
    assert cudnn.math_type(call, None, False) == cudnn.CUDNN_FMA_MATH
    assert cudnn.math_type(call, None, True) == cudnn.CUDNN_TENSOR_OP_MATH
    assert cudnn.math_type(call, highest, True) == cudnn.CUDNN_FMA_MATH
    assert cudnn.math_type(dataclasses.replace(call, dtype="bf16"), None, False) == 1


# ---- finding libcudnn ---------------------------------------------------------------------------

class _FakeLib:
    def __init__(self, symbols=("cudnnConvolutionForward", "cudnnCreate")):
        for s in symbols:
            setattr(self, s, object())


def _touch(path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not really a library")
    return str(path)


def test_cudnn_from_the_wheel_with_its_sublibraries_first(tmp_path):
    lib = tmp_path / "site" / "nvidia" / "cudnn" / "lib"
    main = _touch(lib / "libcudnn.so.9")
    subs = [_touch(lib / f"{n}.so.9") for n in ("libcudnn_cnn", "libcudnn_graph", "libcudnn_ops")]
    _touch(lib / "libcudnn_engines_runtime_compiled.so.9")
    home = _touch(tmp_path / "cuda" / "lib64" / "libcudnn.so.9")
    tried: list[str] = []

    def load(path):
        tried.append(path)
        if "runtime_compiled" in path:
            raise OSError("libnvrtc.so.13: cannot open shared object file")
        return _FakeLib() if path == main else _FakeLib(())

    found = cudnn.load_cudnn({"CUDA_HOME": str(tmp_path / "cuda")}, load,
                             lambda: [str(tmp_path / "site" / "nvidia")])
    assert home not in tried and tried[-1] == main
    graph, ops, cnn = subs[1], subs[2], subs[0]
    assert tried.index(graph) < tried.index(ops) < tried.index(cnn) < tried.index(main)
    assert found.has("cudnnConvolutionForward") and not found.has("cudnnFindNothing")


def test_cudnn_symbols_from_a_sublibrary_and_not_found_is_one_line(tmp_path):
    lib = tmp_path / "cuda" / "lib64"
    main, cnn = _touch(lib / "libcudnn.so.9"), _touch(lib / "libcudnn_cnn.so.9")

    def load(path):
        if path == cnn:
            return _FakeLib(("cudnnConvolutionForward",))
        if path == main:
            return _FakeLib(("cudnnCreate",))
        raise OSError(path)

    found = cudnn.load_cudnn({"CUDA_HOME": str(tmp_path / "cuda")}, load, lambda: [])
    assert found.fn("cudnnConvolutionForward") is not None
    with pytest.raises(CudaError) as info:
        cudnn.load_cudnn({}, lambda p: (_ for _ in ()).throw(OSError(p)), lambda: [])
    message = str(info.value)
    assert "\n" not in message and "HLOC_CUDA_CONV=cudnn" in message
    assert "nvidia-cudnn-cu13" in message


# ---- the cuDNN calls, against a fake libcudnn that computes on the host -------------------------

@pytest.mark.cpu
@pytest.mark.parametrize("name", ["x_and_y_nhwc_in_memory", "depthwise", "one_d", "hwio_filter",
                                  "one_d_wio"])
def test_cudnn_arguments_through_a_host_cudnn(name, monkeypatch):
    case = LAYOUTS[name]
    monkeypatch.delenv("HLOC_CUDA_CONV", raising=False)
    inputs = _inputs(case)
    _, want, ex = emulate_hlo(_text(case), inputs, passes="")
    fake = _HostCudnn(ex.memory)
    engine = cudnn.CudnnConv(_StreamedMemory(ex.memory), ex.program, lib=fake)
    (conv,) = _convs(ex.program)
    converted = bool(conv.dnn.w_strides)
    # The workspace (64 bytes), then the packed filter copy: one slot.
    assert engine.runs(conv.name) and engine.slot == 256 + converted * -(
        -np.prod(conv.dnn.w_dims) * 4 // 256) * 256
    ex.runner.dnn = engine
    got = ex.run(inputs)
    assert fake.calls == 1 and ex.runner.dnn_calls == 1 and fake.transforms == converted
    assert fake.streams == [1000]  # bound once, to the schedule's stream
    assert_close(got, want, atol=1e-5)


@pytest.mark.cpu
def test_cudnn_refusing_a_descriptor_keeps_the_kernel(monkeypatch, caplog):
    case = LAYOUTS["nchw"]
    monkeypatch.delenv("HLOC_CUDA_CONV", raising=False)
    inputs = _inputs(case)
    _, want, ex = emulate_hlo(_text(case), inputs, passes="")
    fake = _HostCudnn(ex.memory)
    refuse = ctypes.CFUNCTYPE(*cudnn.PROTOTYPES["cudnnSetFilterNdDescriptor"][:1],
                              *cudnn.PROTOTYPES["cudnnSetFilterNdDescriptor"][1])(
        lambda *args: 3000)  # CUDNN_STATUS_NOT_SUPPORTED
    fake.fns["cudnnSetFilterNdDescriptor"] = refuse
    cudnn._warned.clear()
    with caplog.at_level(logging.WARNING, logger="hloc.runtime.cuda.cudnn"):
        engine = cudnn.CudnnConv(_StreamedMemory(ex.memory), ex.program, lib=fake)
    assert not engine.plans and engine.workspace == 0
    assert "cuDNN refused 1 convolution" in caplog.text and "CUDNN_STATUS_FAKE" in caplog.text
    ex.runner.dnn = engine
    got = ex.run(inputs)
    assert fake.calls == 0 and ex.runner.dnn_calls == 0
    assert_close(got, want, atol=1e-5)


# ---- samples ------------------------------------------------------------------------------------

# Samples with plain convolutions cuDNN's descriptors express (any filter layout).
DESCRIBED = [("ops/conv_padding_dilation", ".pb"), ("ops/conv_padding_dilation", ".opt.pb"),
             ("conv_variants", ".pb"), ("cnn", ".pb")]


@pytest.mark.cpu
@pytest.mark.parametrize("name,suffix", DESCRIBED)
def test_sample_with_host_conv(name, suffix, tmp_path, monkeypatch):
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    bundle = _bundle(name, tmp_path, ("sm_80",), suffix)
    program, _ = gpu_program_from_json(bytes(bundle.members["gpu_thunks.json"]))
    described = [c for c in _convs(program) if c.dnn is not None]
    assert described
    ex = CudaEmulatedExecutable(bundle)
    outputs = ex.run(sample_arrays(name, "inputs"))
    assert ex.runner.dnn_calls == len(described)
    problems = _problems(name, outputs)
    assert not problems, "; ".join(problems)


# Convolution fusions of ResNets: every convolution is described (HWIO filters converted),
# those with an epilogue split. (model, convolutions, split ones)
RESNETS = [pytest.param(SAMPLES.parent / "benchmarks" / "cases" / "resnet_block.pb", 2, 2,
                        id="resnet_block"),
           pytest.param(SAMPLES.parent / "samples" / "models" / "resnet50.pb", 53, 47,
                        id="resnet50", marks=pytest.mark.slow)]  # a 10 s compile


@pytest.mark.cpu
@pytest.mark.parametrize("model,count,split", RESNETS)
def test_resnet_convolutions_all_get_cudnn_descriptors(model, count, split, tmp_path):
    from hloc.bundle import read_bundle

    from .support.bundles import sample_bundle

    path = sample_bundle(model, tmp_path / "m.bundle", target="cuda", cuda_archs=("sm_80",))
    program, _ = gpu_program_from_json(bytes(read_bundle(str(path)).members["gpu_thunks.json"]))
    convs = _convs(program)
    assert len(convs) == count and all(c.dnn is not None and c.dnn.w_strides for c in convs)
    assert sum(c.variant == "conv.core" for c in convs) == split


# ---- on a real GPU --------------------------------------------------------------------------------

def _cudnn_on_gpu() -> None:
    from .test_cuda_samples import _cuda_device_available

    if not _cuda_device_available():
        pytest.skip("needs cuda-bindings and an NVIDIA GPU")
    try:
        cudnn.load_cudnn()
    except CudaError as e:
        pytest.skip(f"needs libcudnn: {e}")


GPU_LAYOUTS = list(LAYOUTS)


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_LAYOUTS)
def test_layouts_through_cudnn_on_gpu(name, tmp_path, monkeypatch):
    from hloc.runtime import load

    from .support.run import interpret

    _cudnn_on_gpu()
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    monkeypatch.delenv("HLOC_CUDA_TF32", raising=False)
    case = LAYOUTS[name]
    path = compile_text(tmp_path, _text(case), "conv", target="cuda", passes="",
                        cuda_archs=("sm_80", "sm_90"))
    exe = load(str(path), "cuda")
    inputs = _inputs(case)
    got = exe.run(inputs)
    assert exe.runner.dnn is not None and exe.runner.dnn_calls == 1
    rtol, atol = TOLERANCE[case[2].split("[")[0]]
    assert_close([np.asarray(g) for g in got], interpret(_text(case), inputs), rtol=rtol,
                 atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("name,suffix", DESCRIBED)
def test_samples_through_cudnn_on_gpu(name, suffix, tmp_path, monkeypatch):
    from hloc.runtime.cuda.driver import CudaExecutable

    _cudnn_on_gpu()
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")  # dnn_calls counts every call (no replays)
    monkeypatch.delenv("HLOC_CUDA_TF32", raising=False)
    bundle = _bundle(name, tmp_path, ("sm_80", "sm_90"), suffix)
    exe = CudaExecutable(bundle)
    described = [c.name for c in _convs(exe.program) if c.dnn is not None]
    outputs = exe.run(sample_arrays(name, "inputs"))
    assert sorted(exe.runner.dnn.plans) == sorted(described)  # cuDNN refused none
    assert exe.runner.dnn_calls == len(described)
    problems = _problems(name, outputs)
    assert not problems, "; ".join(problems)
    again = exe.run(sample_arrays(name, "inputs"))  # descriptors and workspace reused
    assert exe.runner.dnn_calls == 2 * len(described)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(outputs, again, strict=True))
    _, rows = exe.run_profiled(sample_arrays(name, "inputs"))
    assert {r.name for r in rows if r.kind == "convolution"} >= set(described)
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "1")  # cuDNN's calls captured once, then replayed
    graphed = CudaExecutable(bundle)
    first, second = (graphed.run(sample_arrays(name, "inputs")) for _ in range(2))
    assert graphed.runner.graph_captures >= 1 and graphed.runner.graph_launches >= 2
    assert graphed.runner.dnn_calls == len(described)
    for got in (first, second):
        problems = _problems(name, got)
        assert not problems, "; ".join(problems)


# ---- fused convolutions: the convolution into scratch, then the epilogue ----------------------

FUSED = {
    # conv + bias + ReLU, jax's NHWC activations and HWIO filter.
    "bias_relu": """HloModule m

ENTRY e {
  x = f32[2,9,8,3]{3,2,1,0} parameter(0)
  w = f32[3,3,3,4]{3,2,1,0} parameter(1)
  b = f32[4]{0} parameter(2)
  c = f32[2,9,8,4]{3,2,1,0} convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  bb = f32[2,9,8,4]{3,2,1,0} broadcast(b), dimensions={3}
  a = f32[2,9,8,4]{3,2,1,0} add(c, bb)
  zero = f32[] constant(0)
  z = f32[2,9,8,4]{3,2,1,0} broadcast(zero), dimensions={}
  ROOT r = f32[2,9,8,4]{3,2,1,0} maximum(a, z)
}
""",
    # conv (stride 2, 1x1) + batch-norm scale/shift + residual + ReLU.
    "bn_residual_relu": """HloModule m

ENTRY e {
  x = f32[2,9,8,5]{3,2,1,0} parameter(0)
  w = f32[1,1,5,6]{3,2,1,0} parameter(1)
  s = f32[6]{0} parameter(2)
  t = f32[6]{0} parameter(3)
  res = f32[2,5,4,6]{3,2,1,0} parameter(4)
  c = f32[2,5,4,6]{3,2,1,0} convolution(x, w), window={size=1x1 stride=2x2}, dim_labels=b01f_01io->b01f
  sb = f32[2,5,4,6]{3,2,1,0} broadcast(s), dimensions={3}
  m = f32[2,5,4,6]{3,2,1,0} multiply(c, sb)
  tb = f32[2,5,4,6]{3,2,1,0} broadcast(t), dimensions={3}
  a = f32[2,5,4,6]{3,2,1,0} add(m, tb)
  ar = f32[2,5,4,6]{3,2,1,0} add(a, res)
  zero = f32[] constant(0)
  z = f32[2,5,4,6]{3,2,1,0} broadcast(zero), dimensions={}
  ROOT r = f32[2,5,4,6]{3,2,1,0} maximum(ar, z)
}
""",
}


def _fused_inputs(text: str, seed=11) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    params = [line.split("=")[1].split()[0] for line in text.splitlines()
              if "parameter(" in line]
    return [_array(p, rng) for p in params]


@pytest.mark.cpu
@pytest.mark.parametrize("mode", ["cudnn", "kernel"])
@pytest.mark.parametrize("name", FUSED)
def test_fused_convolution_splits_into_core_and_epilogue(name, mode, monkeypatch):
    monkeypatch.setenv("HLOC_CUDA_CONV", mode)
    text = FUSED[name]
    got, want, ex = emulate_hlo(text, _fused_inputs(text))
    (split,) = [t for t in ex.program.main if isinstance(t, gt.Sequential)]
    core, epilogue = split.thunks
    assert isinstance(core, gt.ConvLaunch) and type(epilogue) is gt.Launch
    assert (core.variant, epilogue.variant) == ("conv.core", "conv.epilogue")
    scratch = ex.program.allocations[core.args[-1].allocation]
    assert scratch.kind == "scratch" and core.dnn.y == core.args[-1] == epilogue.args[-1]
    assert core.dnn.w_strides and core.dnn.y.size >= 4 * np.prod(core.dnn.y_dims)
    assert ex.runner.dnn_calls == (mode == "cudnn")
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
def test_a_wrong_scratch_descriptor_fails_the_comparison(monkeypatch):
    """The epilogue reads what cuDNN's y wrote: y's strides swapped breaks the result."""
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    text = FUSED["bias_relu"]
    inputs = _fused_inputs(text)
    _, want, ex = emulate_hlo(text, inputs)
    call = _convs(ex.program)[0].dnn
    s = call.y_strides
    ex.runner.dnn = _Altered(ex.runner.dnn, y_strides=(s[0], s[1], s[3], s[2]))
    assert not np.allclose(ex.run(inputs)[0], want[0], rtol=1e-3, atol=1e-3)


@pytest.mark.cpu
def test_split_descriptor_outside_its_scratch_argument_is_refused(tmp_path):
    """cuDNN's y must lie inside the launch's scratch argument (what graph and stream
    dependencies know it writes); a bundle whose scratch argument was shrunk is refused."""
    from hloc.runtime import load

    path = compile_text(tmp_path, FUSED["bias_relu"], "conv", target="cuda")
    assert load(str(path), "cuda-emulated") is not None

    def shrink(doc):
        (split,) = [t for t in doc["main"] if t["kind"] == "sequential"]
        split["thunks"][0]["args"][-1][2] = 256

    bad = repack(path, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": shrink})
    with pytest.raises(InputError, match="y slice .* lies in no argument"):
        load(str(bad), "cuda-emulated")


def fused_through_cudnn_on_gpu(text: str, inputs, tmp_path, monkeypatch) -> None:
    """A fused convolution on a GPU with HLOC_CUDA_CONV=cudnn (graphs off, full f32): its
    one described convolution set up (none refused) and ran once, and the result is the
    interpreter's. Shared with test_cuda_dnn_backward."""
    from hloc.runtime import load

    from .support.run import interpret

    _cudnn_on_gpu()
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")
    monkeypatch.delenv("HLOC_CUDA_TF32", raising=False)
    path = compile_text(tmp_path, text, "conv", target="cuda", cuda_archs=("sm_80", "sm_90"))
    exe = load(str(path), "cuda")
    got = exe.run(inputs)
    described = [c.name for c in _convs(exe.program) if c.dnn is not None]
    assert len(described) == 1 and sorted(exe.runner.dnn.plans) == described
    assert exe.runner.dnn_calls == 1
    assert_close([np.asarray(g) for g in got], interpret(text, inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("name", FUSED)
def test_fused_convolutions_through_cudnn_on_gpu(name, tmp_path, monkeypatch):
    """The split form on a GPU: cuDNN runs the core (filter converted) into the scratch, the
    epilogue kernel reads it; every described convolution ran (none refused)."""
    fused_through_cudnn_on_gpu(FUSED[name], _fused_inputs(FUSED[name]), tmp_path, monkeypatch)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["resnet50", "cnn_train_step", "mobilenet_v2"])
def test_convnets_through_cudnn_on_gpu(name, tmp_path, monkeypatch):
    """Whole convnets with HLOC_CUDA_CONV=cudnn: cuDNN set up every described convolution
    (none refused), ran each once per run (graphs off), and the outputs match XLA's."""
    from hloc.runtime.cuda.driver import CudaExecutable

    from .support.bundles import compile_bundle
    from .test_model_samples import MODELS, weights

    _cudnn_on_gpu()
    monkeypatch.setenv("HLOC_CUDA_CONV", "cudnn")
    monkeypatch.setenv("HLOC_CUDA_GRAPHS", "0")
    monkeypatch.delenv("HLOC_CUDA_TF32", raising=False)
    from hloc.bundle import read_bundle

    path = compile_bundle(MODELS / f"{name}.pb", tmp_path / "m.bundle", target="cuda",
                          cuda_archs=("sm_80", "sm_90"))
    exe = CudaExecutable(read_bundle(str(path)))
    described = sorted(c.name for c in _convs(exe.program) if c.dnn is not None)
    meta = weights.meta(name)
    got = exe.run(weights.arrays(meta))
    assert described and sorted(exe.runner.dnn.plans) == described  # none refused
    assert exe.runner.dnn_calls == len(described)
    tol = meta["tolerance"]
    for i, (g, e) in enumerate(zip(got, weights.expected(name), strict=True)):
        err = float(np.max(np.abs(np.asarray(g, np.float64) - e))) if e.size else 0.0
        assert np.allclose(g, e, rtol=tol["rtol"], atol=tol["atol"]), f"out{i}: max error {err}"
