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
