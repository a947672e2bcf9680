"""batch-norm-training, batch-norm-inference and batch-norm-grad (operation semantics).

Statistics are computed in f64 (complex never occurs here) and rounded once to the operand type;
the variance is the biased (population) variance, as XLA defines it.
"""

from __future__ import annotations

import numpy as np

from ...ir import Opcode
from .registry import impl


def _feature_view(v: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A per-feature vector reshaped to broadcast along `axis` of a rank-`rank` array."""
    shape = [1] * rank
    shape[axis] = v.shape[0]
    return v.astype(np.float64).reshape(shape)


def _reduce_axes(rank: int, axis: int) -> tuple[int, ...]:
    return tuple(d for d in range(rank) if d != axis)


@impl(Opcode.BATCH_NORM_TRAINING)
def batch_norm_training(ctx, instr, ops):
    x, scale, offset = ops
    axis, eps = instr.attrs.feature_index, instr.attrs.epsilon
    xw = x.astype(np.float64)
    axes = _reduce_axes(x.ndim, axis)
    with np.errstate(all="ignore"):
        mean = xw.mean(axis=axes) if x.size else np.zeros(x.shape[axis])
        centered = xw - _feature_view(mean, x.ndim, axis)
        var = (centered ** 2).mean(axis=axes) if x.size else np.zeros(x.shape[axis])
        inv = 1.0 / np.sqrt(_feature_view(var, x.ndim, axis) + eps)
        y = centered * inv * _feature_view(scale, x.ndim, axis) + _feature_view(offset, x.ndim, axis)
    return y.astype(x.dtype), mean.astype(x.dtype), var.astype(x.dtype)


@impl(Opcode.BATCH_NORM_INFERENCE)
def batch_norm_inference(ctx, instr, ops):
    x, scale, offset, mean, var = ops
    axis, eps = instr.attrs.feature_index, instr.attrs.epsilon
    f = lambda v: _feature_view(v, x.ndim, axis)  # noqa: E731
    with np.errstate(all="ignore"):
        y = (x.astype(np.float64) - f(mean)) / np.sqrt(f(var) + eps) * f(scale) + f(offset)
    return y.astype(x.dtype)


@impl(Opcode.BATCH_NORM_GRAD)
def batch_norm_grad(ctx, instr, ops):
    x, scale, mean, var, grad_y = ops
    axis, eps = instr.attrs.feature_index, instr.attrs.epsilon
    f = lambda v: _feature_view(v, x.ndim, axis)  # noqa: E731
    axes = _reduce_axes(x.ndim, axis)
    count = max(1, x.size // max(1, x.shape[axis]))
    dy = grad_y.astype(np.float64)
    with np.errstate(all="ignore"):
        centered = x.astype(np.float64) - f(mean)
        inv_std = 1.0 / np.sqrt(f(var) + eps)
        grad_offset = dy.sum(axis=axes)
        grad_scale = (dy * centered * inv_std).sum(axis=axes)
        c = (dy * centered).sum(axis=axes) / count / (var.astype(np.float64) + eps)
        d = grad_offset / count
        grad_x = f(scale) * inv_std * (dy - f(d) - f(c) * centered)
    return grad_x.astype(x.dtype), grad_scale.astype(x.dtype), grad_offset.astype(x.dtype)
