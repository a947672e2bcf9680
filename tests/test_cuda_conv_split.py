"""Convolutions whose outputs share threads (hloc.codegen.cuda.conv_split): the weight
gradients of a training step, alone and fused with the SGD update, on the emulator against
the interpreter. A weight gradient cuDNN's backward-filter call can run is split into its
core (conv.core, the threads-sharing kernel writing scratch, or cuDNN) and the epilogue
(conv_core); conv.split itself keeps the long sums cuDNN cannot take."""

from __future__ import annotations

import numpy as np
import pytest

from hloc.codegen.cuda import conv_split

from .support.bundles import variants
from .support.run import emulate_hlo

# A weight gradient as JAX lowers it (batch as the contracted feature, the activations'
# spatial extent as the window), fused with w - lr * grad.
WGRAD = """HloModule wgrad

fused {
  x = f32[{n},{h},{w},{ci}] parameter(0)
  dy = f32[{n},{h},{w},{co}] parameter(1)
  w = f32[3,3,{ci},{co}] parameter(2)
  g = f32[3,3,{ci},{co}] convolution(x, dy), window={size={h}x{w} pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
  lr = f32[] constant(0.01)
  lrb = f32[3,3,{ci},{co}] broadcast(lr), dimensions={}
  step = f32[3,3,{ci},{co}] multiply(lrb, g)
  ROOT new = f32[3,3,{ci},{co}] subtract(w, step)
}

ENTRY e {
  x = f32[{n},{h},{w},{ci}] parameter(0)
  dy = f32[{n},{h},{w},{co}] parameter(1)
  w = f32[3,3,{ci},{co}] parameter(2)
  ROOT f = f32[3,3,{ci},{co}] fusion(x, dy, w), kind=kOutput, calls=fused
}
"""

# A plain convolution with few outputs and a long sum (a 1x1 output window over a big input).
LONG = """HloModule long

ENTRY e {
  x = f32[2,32,32,{ci}] parameter(0)
  k = f32[32,32,{ci},8] parameter(1)
  ROOT c = f32[2,1,1,8] convolution(x, k), window={size=32x32}, dim_labels=b01f_01io->b01f
}
"""


def _text(template: str, **sizes) -> str:
    for key, value in sizes.items():
        template = template.replace("{" + key + "}", str(value))
    return template


def _args(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.cpu
@pytest.mark.parametrize("n,h,ci,co", [(16, 16, 3, 16),   # few outputs: a block per output
                                       (8, 16, 13, 36),   # more: tiles, the last part-full
                                       (16, 16, 12, 12)])  # half a block per output
def test_weight_gradient_with_its_update(n, h, ci, co):
    text = _text(WGRAD, n=n, h=h, w=h, ci=ci, co=co)
    args = _args([(n, h, h, ci), (n, h, h, co), (3, 3, ci, co)])
    got, want, ex = emulate_hlo(text, args, passes="")
    assert variants(ex)["conv.core"] == 1 and variants(ex)["conv.split"] == 0
    recipe = next(r for r in ex.program.kernels if r.variant == "conv.core")
    outputs, terms = 9 * ci * co, n * h * h
    if outputs >= conv_split.TILE_FROM:  # tiles of 32 outputs by slices of the sum
        assert recipe.param("slices") == conv_split.tile_slices(outputs, terms)
    else:  # a group of threads per output
        assert recipe.param("group") == conv_split.group_size(outputs, terms)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.cpu
def test_every_shape_of_the_kernel_is_exercised():
    assert conv_split.group_size(9 * 3 * 16, 16 * 16 * 16) == conv_split.BLOCK
    assert conv_split.group_size(9 * 12 * 12, 16 * 16 * 16) < conv_split.BLOCK
    assert 9 * 13 * 36 >= conv_split.TILE_FROM > 9 * 12 * 12
    assert conv_split.tile_slices(9 * 13 * 36, 8 * 16 * 16) > 4


@pytest.mark.cpu
def test_a_long_plain_convolution():
    text = _text(LONG, ci=64)
    args = _args([(2, 32, 32, 64), (32, 32, 64, 8)], seed=1)
    got, want, ex = emulate_hlo(text, args, passes="")
    # Its window is larger than its output: a weight gradient's form, so cuDNN's backward
    # filter can run it; hloc's core kernel still shares outputs among threads.
    core = next(r for r in ex.program.kernels if r.variant == "conv.core")
    assert core.param("group", 0) or core.param("slices", 0)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.cpu
def test_long_sums_cudnn_cannot_take_stay_conv_split():
    """A long-sum convolution with batch groups (no cuDNN form) keeps conv.split."""
    text = _text(LONG, ci=128).replace("dim_labels=b01f_01io->b01f",
                                       "dim_labels=b01f_01io->b01f, feature_group_count=2")
    text = text.replace("k = f32[32,32,128,8]", "k = f32[32,32,64,8]")
    args = _args([(2, 32, 32, 128), (32, 32, 64, 8)], seed=1)
    got, want, ex = emulate_hlo(text, args, passes="")
    assert variants(ex)["conv.split"] == 1
    # 65,536 products per output, summed in float32 in another order than the interpreter's
    # (whose order follows the host's BLAS): both against float64, within a rounding bound.
    x, k = (a.astype(np.float64) for a in args)
    exact = np.stack([np.einsum("nhwc,hwco->no", x[..., 64 * g:64 * (g + 1)],
                                k[..., 4 * g:4 * (g + 1)]) for g in range(2)], axis=1)
    exact = exact.reshape(2, 1, 1, 8)
    squares = np.stack([np.einsum("nhwc,hwco->no", x[..., 64 * g:64 * (g + 1)] ** 2,
                                  k[..., 4 * g:4 * (g + 1)] ** 2) for g in range(2)], axis=1)
    bound = 8 * np.sqrt(32 * 32 * 64) * np.finfo(np.float32).eps * np.sqrt(squares)
    for result in (got[0], want[0]):
        assert np.all(np.abs(result - exact) <= bound.reshape(2, 1, 1, 8))
    assert np.abs(got[0] - exact).max() < 1e-3 * np.abs(exact).max()


@pytest.mark.cpu
def test_short_sums_stay_in_the_loop_kernel():
    text = _text(WGRAD, n=1, h=4, w=4, ci=16, co=16)
    args = _args([(1, 4, 4, 16), (1, 4, 4, 16), (3, 3, 16, 16)])
    got, want, ex = emulate_hlo(text, args, passes="")
    assert variants(ex)["conv.split"] == 0
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.cpu
@pytest.mark.parametrize("n,h,ci,co,tile", [(8, 8, 12, 36, 4),   # 4 input features a lane
                                            (8, 8, 6, 40, 2),    # 6: a tile of 2
                                            (8, 8, 9, 36, 1)])   # 9: no tile
def test_weight_gradient_lanes_sum_tiles_of_input_features(monkeypatch, n, h, ci, co, tile):
    """Tile mode with each lane summing neighbouring input features (the output's batch dim),
    which share every term's dy load; here even for grids under MIN_TILE_BLOCKS."""
    monkeypatch.setattr(conv_split, "MIN_TILE_BLOCKS", 0)
    text = _text(WGRAD, n=n, h=h, w=h, ci=ci, co=co)
    args = _args([(n, h, h, ci), (n, h, h, co), (3, 3, ci, co)], seed=3)
    got, want, ex = emulate_hlo(text, args, passes="")
    recipe = next(r for r in ex.program.kernels if r.variant == "conv.core")
    assert recipe.param("tile", 1) == tile
    assert recipe.param("slices") == conv_split.tile_slices(9 * ci * co // tile, n * h * h)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.cpu
def test_slices_share_the_fewest_major_axes_evenly():
    assert conv_split.outer_axes([32, 16, 16], 16) == 1  # a batch element each, nested taps
    assert conv_split.outer_axes([4, 16, 16], 32) == 2   # 4 positions are too few for 32
    assert conv_split.outer_axes([5, 7], 4) == 2         # none: one flattened loop


# A transposed convolution as JAX lowers an input gradient (the kernel 01oi: its output
# features are not its minor dim), fused with the ReLU mask of the layer it feeds.
TRANSPOSED = """HloModule transposed

fused {
  b = f32[{co}] parameter(0)
  pre = f32[{n},{h2},{h2},{co}] parameter(1)
  dy = f32[{n},{h},{h},{ci}] parameter(2)
  k = f32[3,3,{co},{ci}] parameter(3)
  bb = f32[{n},{h2},{h2},{co}] broadcast(b), dimensions={3}
  z = f32[{n},{h2},{h2},{co}] add(pre, bb)
  zero = f32[] constant(0)
  zeros = f32[{n},{h2},{h2},{co}] broadcast(zero), dimensions={}
  gt = pred[{n},{h2},{h2},{co}] compare(z, zeros), direction=GT
  dx = f32[{n},{h2},{h2},{co}] convolution(dy, k), window={size=3x3 pad=2_1x2_1 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f
  ROOT r = f32[{n},{h2},{h2},{co}] select(gt, dx, zeros)
}

ENTRY e {
  b = f32[{co}] parameter(0)
  pre = f32[{n},{h2},{h2},{co}] parameter(1)
  dy = f32[{n},{h},{h},{ci}] parameter(2)
  k = f32[3,3,{co},{ci}] parameter(3)
  ROOT f = f32[{n},{h2},{h2},{co}] fusion(b, pre, dy, k), kind=kOutput, calls=fused
}
"""


@pytest.mark.cpu
@pytest.mark.parametrize("co,tile", [(16, 8), (12, 4), (6, 2), (5, 1)])
def test_transposed_convolution_threads_sum_tiles_of_output_features(monkeypatch, co, tile):
    """The split core of a transposed convolution: a thread per tile of output features
    (conv_core.feature_tile), here even for grids under MIN_TILE_THREADS."""
    from hloc.codegen.cuda import conv_core

    monkeypatch.setattr(conv_core, "MIN_TILE_THREADS", 0)
    n, h, ci = 2, 5, 8
    text = _text(TRANSPOSED, n=n, h=h, h2=2 * h, ci=ci, co=co)
    args = _args([(co,), (n, 2 * h, 2 * h, co), (n, h, h, ci), (3, 3, co, ci)], seed=4)
    got, want, ex = emulate_hlo(text, args, passes="")
    recipe = next(r for r in ex.program.kernels if r.variant == "conv.core")
    assert recipe.param("tile", 1) == tile
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.cpu
def test_features_tile_only_where_the_kernel_reads_would_not_coalesce():
    from hloc.codegen.cuda.conv_core import feature_tile
    from hloc.frontend import load_bytes

    def conv(text):
        module = load_bytes(text.encode(), "transposed.hlo").module
        fused = next(c for c in module.computations if c.is_fusion)
        return next(i for i in fused.instructions if i.opcode.name == "CONVOLUTION")

    big = dict(n=32, h=16, h2=32, ci=32, co=16)
    assert feature_tile(conv(_text(TRANSPOSED, **big))).count == 8
    # The kernel's output features minor (01io, a forward convolution's): one each.
    assert feature_tile(conv(_text(TRANSPOSED, **big).replace("01oi", "01io").replace(
        "k = f32[3,3,16,32]", "k = f32[3,3,32,16]"))) is None
    # Too few output elements for a tile to leave the GPU enough threads.
    assert feature_tile(conv(_text(TRANSPOSED, n=1, h=4, h2=8, ci=8, co=16))) is None


@pytest.mark.cpu
@pytest.mark.parametrize("params,fragment", [({"tile": 1 << 40}, "recipe parameter tile="),
                                             ({"tile_dim": 1}, "neither the output's batch"),
                                             ({"tile": 3}, "rebuilt IR differs")])
def test_an_edited_tile_is_refused_in_one_line(tmp_path, params, fragment):
    """A tampered bundle (digests recomputed) whose tiled core asks for an absurd or wrong
    tile: one line, exit 2, no kernel emitted for hours."""
    from .trust_support import assert_refused_in_one_line, compile_text, repack

    text = _text(TRANSPOSED, n=32, h=16, h2=32, ci=32, co=16)
    path = compile_text(tmp_path, text, "transposed", target="cuda", passes="")

    def edit(doc):
        (core,) = [k for k in doc["kernels"] if k["variant"] == "conv.core"]
        assert core["params"]["tile"] == 8
        core["params"].update(params)

    assert_refused_in_one_line(
        repack(path, tmp_path / "bad.bundle", edit_json={"gpu_thunks.json": edit}), fragment)
