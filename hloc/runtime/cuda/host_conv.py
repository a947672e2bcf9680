"""cuDNN descriptors (hloc.thunks.gpu.ConvCall) on the host: the emulator's stand-in for
cuDNN under HLOC_CUDA_CONV=cudnn.

The call keeps cuDNN's contract exactly, reading nothing from the HLO: x and y are read and
written through the descriptor's N, C, spatial dims and element strides, the filter through
its packed format (NCHW: K, C, spatial; NHWC: K, spatial, C) or, when the descriptor has
filter strides, through those into a packed K, C, spatial copy (cudnnTransformTensor's part
on a GPU), then a cross-correlation with
symmetric zero padding, window strides, dilation and groups (output feature k uses input
features g*C/groups ... of group g = k // (K/groups)), y = 1 * conv + 0 * y. Sums run in f64
and are rounded to y's type once, so every number of a descriptor is exercised as the GPU
would use it and a wrong one shows up against the interpreter.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...ir import dtypes
from ...thunks.gpu import ConvCall
from .cudnn import check_conv, filter_strides


def _tensor(raw: np.ndarray, dtype: str, dims, steps, writeable: bool = False) -> np.ndarray:
    """The elements of a slice (bytes) seen through dims and element strides."""
    typed = raw.view(dtypes.to_numpy(dtypes.from_name(dtype)))
    size = typed.itemsize
    return np.lib.stride_tricks.as_strided(typed, shape=tuple(dims),
                                           strides=tuple(s * size for s in steps),
                                           writeable=writeable)


def convolve(call: ConvCall, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """cuDNN's forward cross-correlation of x (N, C, spatial) with w (K, C/groups, spatial)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n = x.shape[0]
    k, cg = w.shape[:2]
    g = call.groups
    pads = [(0, 0), (0, 0)] + [(p, p) for p in call.padding]
    x = np.pad(x, pads)
    x = x.reshape(n, g, cg, *x.shape[2:])
    y_spatial = call.y_dims[2:]
    out = np.zeros((n, g, k // g, *y_spatial))
    wg = w.reshape(g, k // g, cg, *w.shape[2:])
    for taps in itertools.product(*(range(r) for r in w.shape[2:])):
        window = tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(
            taps, call.dilation, y_spatial, call.window_strides, strict=True))
        patch = x[(slice(None), slice(None), slice(None), *window)]  # n, g, cg, y...
        out += np.einsum("ngc...,gkc->ngk...", patch, wg[(...,) + tuple(taps)])
    return out.reshape(n, k, *y_spatial)


class HostConv:
    """Runs ConvCall descriptors on emulated device memory (cuda_emulated.HostMemory)."""

    def __init__(self, memory):
        self.memory = memory

    def runs(self, name: str) -> bool:
        return True

    def __call__(self, call: ConvCall, name: str) -> None:
        check_conv(call, name)
        x = _tensor(self.memory.view(call.x), call.dtype, call.x_dims, call.x_strides)
        w = _tensor(self.memory.view(call.w), call.dtype, call.w_dims, filter_strides(call))
        y = _tensor(self.memory.view(call.y), call.dtype, call.y_dims, call.y_strides,
                    writeable=True)
        y[...] = convolve(call, np.array(x), np.array(w)).astype(y.dtype)
