"""Convolutions on the CPU against the reference interpreter (and XLA's outputs in samples/):
the native kernel for small convolutions (hloc/codegen/cpu/conv.py) and the host paths of
hloc/runtime/cpu/conv.py, in every form: feature / batch groups, strides, padding (negative
too), input and window dilation, window reversal, 1-3 spatial dims, other layouts and
element types, NaN and infinities."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.cpu import conv as native_conv
from tests.conftest import SAMPLES, sample_arrays, sample_meta, sample_names

from .support.bundles import compile_bundle, kernels_json, load_cpu, members, sample_bundle
from .support.hlo import conv_out_size
from .support.kernels import check_hlo
from .support.run import compare_with_interpreter, run_cases
from .support.values import assert_matches

pytestmark = pytest.mark.cpu


def conv_text(t: str, n: int, spatial, c: int, o: int, kernel, *, stride=None, pad=None,
              lhs=None, rhs=None, rev=None, groups: int = 1, batch_groups: int = 1,
              out_t: str | None = None) -> str:
    """An NHWC / HWIO -> NHWC convolution module (any number of spatial dims)."""
    ns = len(spatial)
    stride, pad = stride or [1] * ns, pad or [(0, 0)] * ns
    lhs, rhs, rev = lhs or [1] * ns, rhs or [1] * ns, rev or [0] * ns
    out = [conv_out_size(*a) for a in zip(spatial, kernel, stride, pad, lhs, rhs, strict=True)]
    letters = "012"[:ns]
    window = (f"size={'x'.join(map(str, kernel))} stride={'x'.join(map(str, stride))} "
              f"pad={'x'.join(f'{lo}_{hi}' for lo, hi in pad)} "
              f"lhs_dilate={'x'.join(map(str, lhs))} rhs_dilate={'x'.join(map(str, rhs))} "
              f"rhs_reversal={'x'.join(map(str, rev))}")
    x = f"{t}[{n},{','.join(map(str, spatial))},{c}]"
    w = f"{t}[{','.join(map(str, kernel))},{c // groups},{o}]"
    y = f"{out_t or t}[{n // batch_groups},{','.join(map(str, out))},{o}]"
    return (f"HloModule c\nENTRY e {{\n  x = {x} parameter(0)\n  w = {w} parameter(1)\n"
            f"  ROOT c = {y} convolution(x, w), window={{{window}}}, "
            f"dim_labels=b{letters}f_{letters}io->b{letters}f, feature_group_count={groups}, "
            f"batch_group_count={batch_groups}\n}}\n")


FORMS = {
    "same_3x3": dict(n=2, spatial=[10, 10], c=3, o=4, kernel=[3, 3], pad=[(1, 1), (1, 1)]),
    "stride_uneven_pad": dict(n=2, spatial=[9, 8], c=3, o=5, kernel=[3, 3], stride=[2, 3],
                              pad=[(1, 2), (0, 1)]),
    "window_dilation": dict(n=2, spatial=[11, 13], c=3, o=5, kernel=[3, 3], rhs=[2, 3]),
    "transposed": dict(n=2, spatial=[5, 6], c=3, o=4, kernel=[4, 4], lhs=[2, 2],
                       pad=[(2, 2), (3, 1)]),
    "negative_pad": dict(n=2, spatial=[9, 8], c=2, o=4, kernel=[3, 2], pad=[(-1, 2), (1, -1)]),
    "all_dilations": dict(n=1, spatial=[6, 7], c=2, o=3, kernel=[3, 2], stride=[2, 1],
                          pad=[(3, 0), (0, 2)], lhs=[2, 3], rhs=[2, 2]),
    "negative_pad_dilated": dict(n=2, spatial=[7, 6], c=2, o=3, kernel=[2, 3], lhs=[3, 2],
                                 pad=[(-2, -1), (-3, 2)], stride=[2, 1]),
    "feature_groups": dict(n=2, spatial=[7, 7], c=6, o=6, kernel=[3, 3], pad=[(1, 1), (1, 1)],
                           groups=3),
    "depthwise": dict(n=2, spatial=[11, 9], c=6, o=12, kernel=[3, 3], pad=[(1, 1), (1, 1)],
                      groups=6),
    # One feature per group: units sweep blocks of groups (conv._depthwise), 70 = 64 + a tail.
    "depthwise_single": dict(n=2, spatial=[9, 8], c=6, o=6, kernel=[3, 3], stride=[2, 1],
                             pad=[(1, 1), (1, 1)], groups=6),
    "depthwise_wide": dict(n=1, spatial=[5, 6], c=70, o=70, kernel=[5, 5], stride=[2, 2],
                           pad=[(2, 2), (1, 2)], groups=70, rev=[0, 1]),
    "batch_groups": dict(n=4, spatial=[7, 7], c=3, o=6, kernel=[3, 3], batch_groups=2),
    "reversed": dict(n=2, spatial=[8, 7], c=3, o=4, kernel=[3, 2], rev=[1, 0],
                     pad=[(1, 1), (0, 0)]),
    "reversed_groups": dict(n=1, spatial=[6, 6], c=4, o=4, kernel=[2, 3], rev=[1, 1], groups=2),
    "one_d": dict(n=3, spatial=[11], c=3, o=2, kernel=[4], pad=[(1, 2)], stride=[2]),
    "three_d": dict(n=1, spatial=[5, 4, 6], c=2, o=3, kernel=[2, 3, 2], stride=[1, 2, 1],
                    pad=[(0, 1), (0, 1), (0, 1)]),
    "pointwise": dict(n=2, spatial=[6, 5], c=7, o=3, kernel=[1, 1]),
    "wide_features": dict(n=1, spatial=[5, 5], c=3, o=70, kernel=[3, 3], pad=[(1, 1), (1, 1)]),
    "wide_groups": dict(n=1, spatial=[4, 4], c=4, o=140, kernel=[2, 2], groups=2),
    # Few output features: units are blocks of positions along the minor-most spatial
    # dimension (conv.POSITION_FEATURES): 70 = 64 + a tail; a stride, a negative padding,
    # window dilation and reversal along it; several features (one input feature: unit
    # stride); input dilation along the other dimension.
    "stencil_wide": dict(n=1, spatial=[5, 70], c=1, o=1, kernel=[3, 3], pad=[(1, 1), (1, 1)]),
    "stencil_strided": dict(n=2, spatial=[6, 40], c=2, o=1, kernel=[2, 5], stride=[1, 3],
                            pad=[(0, 1), (-2, 4)], rhs=[1, 2], rev=[0, 1]),
    "stencil_features": dict(n=2, spatial=[6, 33], c=1, o=3, kernel=[3, 4],
                             pad=[(1, 1), (2, -1)], rhs=[1, 2]),
    "stencil_outer_lhs": dict(n=1, spatial=[4, 20], c=1, o=2, kernel=[3, 3], lhs=[2, 1],
                              pad=[(1, 1), (2, 0)]),
}


def _inputs(t: str, form: dict, seed: int = 0, specials: bool = False):
    rng = np.random.default_rng(seed)
    xs = (form["n"], *form["spatial"], form["c"])
    ws = (*form["kernel"], form["c"] // form.get("groups", 1), form["o"])
    if t in ("s32", "s8"):
        return [rng.integers(-9, 10, xs).astype(t.replace("s", "int")),
                rng.integers(-9, 10, ws).astype(t.replace("s", "int"))]
    if t == "pred":
        return [rng.random(xs) < 0.3, rng.random(ws) < 0.3]
    from hloc.ir import dtypes

    dt = dtypes.to_numpy(dtypes.from_name(t))
    x = rng.standard_normal(xs)
    if specials:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, 3, replace=False)] = [np.nan, np.inf, -np.inf]
    return [x.astype(dt), rng.standard_normal(ws).astype(dt)]


@pytest.mark.parametrize("name", list(FORMS))
def test_native_kernel_matches_interpreter(name):
    text = conv_text("f32", **FORMS[name])
    # chunks=3: split unit ranges must compute the same (units are independent).
    check_hlo(text, _inputs("f32", FORMS[name]), rtol=1e-5, atol=1e-5, chunks=3)


@pytest.mark.parametrize("t,tol", [("bf16", 1e-2), ("f16", 1e-3), ("f64", 1e-12), ("s32", 0),
                                   ("s8", 0), ("pred", 0)])
@pytest.mark.parametrize("name", ["same_3x3", "feature_groups", "depthwise_single",
                                  "batch_groups", "transposed"])
def test_native_kernel_element_types(name, t, tol):
    text = conv_text(t, **FORMS[name])
    check_hlo(text, _inputs(t, FORMS[name], seed=1), rtol=tol, atol=tol)


@pytest.mark.parametrize("name,units_per_position", [
    ("depthwise_wide", 2),  # 70 groups of one feature: blocks of 64 and 6 neighbouring groups
    ("depthwise", 6),  # two output features per group: a unit per group
    ("feature_groups", 3),
])
def test_units_per_output_position(name, units_per_position, tmp_path):
    form = FORMS[name]
    bundle = compile_bundle(conv_text("f32", **form), tmp_path / "c.bundle")
    (kernel,) = kernels_json(bundle)["kernels"].values()
    out = [conv_out_size(*a) for a in zip(form["spatial"], form["kernel"],
                                           form.get("stride") or [1] * len(form["spatial"]),
                                           form.get("pad") or [(0, 0)] * len(form["spatial"]),
                                           [1] * len(form["spatial"]), [1] * len(form["spatial"]),
                                           strict=True)]
    positions = form["n"] * int(np.prod(out))
    assert kernel["parallel_extent"] == positions * units_per_position


@pytest.mark.parametrize("name,rows,blocks", [
    ("stencil_wide", 5, 2),  # 70 positions: blocks of 64 and 6
    ("stencil_strided", 2 * 6, 1),
    ("stencil_features", 2 * 6, 1),
    ("same_3x3", 2 * 10 * 10, 1),  # 4 features read 3 input features: feature blocks
])
def test_few_features_vectorize_over_positions(name, rows, blocks, tmp_path):
    bundle = compile_bundle(conv_text("f32", **FORMS[name]), tmp_path / "c.bundle")
    (kernel,) = kernels_json(bundle)["kernels"].values()
    assert kernel["parallel_extent"] == rows * blocks


@pytest.mark.parametrize("name,rolled", [("depthwise_wide", True), ("depthwise_single", True),
                                          ("same_3x3", False), ("feature_groups", False)])
def test_depthwise_taps_stay_rolled(name, rolled, tmp_path):
    """A depthwise unit's tap loops ask LLVM not to unroll them: unrolled around the
    vectorized block of groups, their address arithmetic cost LLVM's loop strength reduction
    up to 0.1 s per kernel (EfficientNet's 5x5 layers), for no faster code."""
    bundle = compile_bundle(conv_text("f32", **FORMS[name]), tmp_path / "c.bundle")
    assert ("llvm.loop.unroll.disable" in members(bundle)["module.ll"].decode()) == rolled


def test_single_channel_stencil_in_nchw():
    """jax's layout for a 2-D stencil (NCHW, OIHW): positions along W, unit stride."""
    text = """HloModule s
ENTRY e {
  x = f32[2,1,12,75] parameter(0)
  w = f32[1,1,3,3] parameter(1)
  ROOT c = f32[2,1,12,75] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}
"""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 1, 12, 75)).astype(np.float32), \
        rng.standard_normal((1, 1, 3, 3)).astype(np.float32)
    check_hlo(text, [x, w], rtol=1e-5, atol=1e-5, chunks=3)


def test_native_kernel_accumulates_integers_in_64_bits():
    form = dict(n=1, spatial=[4, 4], c=8, o=2, kernel=[3, 3], pad=[(1, 1), (1, 1)])
    x = np.full((1, 4, 4, 8), 2 ** 20, np.int32)
    w = np.full((3, 3, 8, 2), 2 ** 12, np.int32)  # products wrap in 32 bits, sums too
    check_hlo(conv_text("s32", **form), [x, w])


def test_native_kernel_nan_and_infinities():
    form = FORMS["same_3x3"]
    check_hlo(conv_text("f32", **form), _inputs("f32", form, seed=4, specials=True),
              rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(FORMS))
def test_whole_pipeline(name, conv_path, tmp_path):
    form = FORMS[name]
    cases = {name: (conv_text("f32", **form), _inputs("f32", form, seed=2))}
    outcome = compare_with_interpreter(cases, tmp=tmp_path, rtol=1e-5, atol=1e-5)[name]
    meta = kernels_json(outcome.artifact)
    assert not meta["fallbacks"]
    assert bool(meta["kernels"]) == (conv_path == "native"), meta["kernels"]


@pytest.mark.parametrize("t", ["f64", "c64"])
def test_runtime_path_other_blas_types(t, conv_path, tmp_path):
    form = FORMS["reversed_groups"]
    rng = np.random.default_rng(60)
    args = _inputs("f64", form, seed=6)
    if t == "c64":
        args = [(a + 1j * rng.standard_normal(a.shape)).astype(np.complex64) for a in args]
    o = run_cases({t: (conv_text(t, **form), args)}, tmp=tmp_path)[t]
    real = np.float32 if t == "c64" else np.float64  # compare complex as (re, im) pairs
    assert_matches(o.got[0].view(real), o.want[0].view(real), rtol=1e-5, atol=1e-5)


def test_large_convolutions_keep_the_runtime_path(tmp_path):
    form = dict(n=2, spatial=[32, 32], c=32, o=32, kernel=[3, 3], pad=[(1, 1), (1, 1)])
    text = conv_text("f32", **form)
    assert 2 * 32 * 32 * 32 * 32 * 9 > native_conv.NATIVE_MAX_MACS
    (outcome,) = compare_with_interpreter({"case": (text, _inputs("f32", form, seed=3))},
                                          tmp=tmp_path, rtol=1e-4, atol=1e-4).values()
    assert not kernels_json(outcome.artifact)["kernels"]


def _samples_with(op: str) -> list[str]:
    names = sample_names() + sample_names("ops")
    return [n for n in names if (SAMPLES / f"{n}.hlo").exists()
            and f" {op}(" in (SAMPLES / f"{n}.hlo").read_text()]


@pytest.mark.parametrize("suffix", [".pb", ".opt.pb"])
@pytest.mark.parametrize("name", _samples_with("convolution"))
def test_samples_match_xla(name, suffix, conv_path, tmp_path):
    # The native path is the default compile (shared with test_cpu_samples); the runtime
    # path patches the compiler, which the compile cache cannot see.
    compile_fn = sample_bundle if conv_path == "native" else compile_bundle
    bundle = compile_fn(SAMPLES / f"{name}{suffix}", tmp_path / "s.bundle")
    fallbacks = kernels_json(bundle)["fallbacks"]
    assert not [f for f in fallbacks.values() if f["opcode"] == "convolution"], fallbacks
    got = load_cpu(bundle).run(sample_arrays(name, "inputs"))
    outputs = sample_meta(name)["outputs"]
    for i, (g, w) in enumerate(zip(got, sample_arrays(name, "expected"), strict=True)):
        assert_matches(g, w, rtol=max(2e-3, outputs[i]["rtol"]),
                       atol=max(2e-4, outputs[i]["atol"]), what=f"{name} out{i}")
