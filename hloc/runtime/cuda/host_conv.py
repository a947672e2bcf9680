"""cuDNN descriptors (hloc.thunks.gpu.ConvCall) on the host: the emulator's stand-in for
cuDNN under HLOC_CUDA_CONV=cudnn.

The call keeps cuDNN's contract exactly, reading nothing from the HLO: x and y are read and
written through the descriptor's N, C, spatial dims and element strides, the filter through
its packed format (NCHW: K, C, spatial; NHWC: K, spatial, C) or, when the descriptor has
filter strides, through those into a packed K, C, spatial copy (cudnnTransformTensor's part
on a GPU). Each direction is its cuDNN definition over the forward convolution's window
(symmetric zero padding, window strides, dilation, groups: output feature k uses input
features g*C/groups ... of group g = k // (K/groups); CUDNN_CONVOLUTION mode reads the taps
reversed): forward writes y = conv(x, w), backward_data writes x = the transpose applied to
y (every x element, zero where no tap reaches it), backward_filter writes w = the gradient
of sum(y * conv(x, w)) with respect to w; the written tensor's old contents are ignored
(beta = 0). Sums run in f64 and are rounded to the written type once, so every number of a
descriptor is exercised as the GPU would use it and a wrong one shows up against the
interpreter.

It also refuses what real cuDNN was seen to refuse (`unsupported`), as the cuDNN engine does
at setup: such a thunk runs hloc's kernel with one warning, so a mapping that real cuDNN
would turn down fails the emulated tests' "ran on cuDNN" checks instead of passing unseen.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...ir import dtypes
from ...thunks.gpu import ConvCall, ConvLaunch
from .conv_check import check_conv, filter_strides, nhwc_strided
from .cudnn import CUDNN_STATUS_NOT_SUPPORTED, DIRECTIONS, warn_refused


def _tensor(raw: np.ndarray, dtype: str, dims, steps, writeable: bool = False) -> np.ndarray:
    """The elements of a slice (bytes) seen through dims and element strides."""
    typed = raw.view(dtypes.to_numpy(dtypes.from_name(dtype)))
    size = typed.itemsize
    return np.lib.stride_tricks.as_strided(typed, shape=tuple(dims),
                                           strides=tuple(s * size for s in steps),
                                           writeable=writeable)


def _taps(call: ConvCall, w_spatial) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(tap as the window reads it, tap as the filter stores it) for every filter tap."""
    taps = list(itertools.product(*(range(r) for r in w_spatial)))
    if call.mode != "convolution":
        return [(t, t) for t in taps]
    return [(t, tuple(r - 1 - i for r, i in zip(w_spatial, t, strict=True))) for t in taps]


def _window(call: ConvCall, tap) -> tuple[slice, ...]:
    """The padded input positions o*stride + tap*dilation for every output position o."""
    return tuple(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, o, s in zip(
        tap, call.dilation, call.y_dims[2:], call.window_strides, strict=True))


def convolve(call: ConvCall, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """cuDNN's forward convolution of x (N, C, spatial) with w (K, C/groups, spatial)."""
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n = x.shape[0]
    k, cg = w.shape[:2]
    g = call.groups
    pads = [(0, 0), (0, 0)] + [(p, p) for p in call.padding]
    x = np.pad(x, pads)
    x = x.reshape(n, g, cg, *x.shape[2:])
    out = np.zeros((n, g, k // g, *call.y_dims[2:]))
    wg = w.reshape(g, k // g, cg, *w.shape[2:])
    for tap, stored in _taps(call, w.shape[2:]):
        patch = x[(slice(None), slice(None), slice(None), *_window(call, tap))]  # n, g, cg, y..
        out += np.einsum("ngc...,gkc->ngk...", patch, wg[(...,) + stored])
    return out.reshape(n, k, *call.y_dims[2:])


def backward_data(call: ConvCall, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """cuDNN's backward data (groups 1): dx (N, C, spatial) from dy (N, K, spatial) and w."""
    dy, w = dy.astype(np.float64), w.astype(np.float64)
    padded = [x + 2 * p for x, p in zip(call.x_dims[2:], call.padding, strict=True)]
    dx = np.zeros((*call.x_dims[:2], *padded))
    for tap, stored in _taps(call, w.shape[2:]):
        window = (slice(None), slice(None), *_window(call, tap))
        dx[window] += np.einsum("nk...,kc->nc...", dy, w[(...,) + stored])
    inside = tuple(slice(p, p + x) for p, x in zip(call.padding, call.x_dims[2:], strict=True))
    return dx[(slice(None), slice(None), *inside)]


def backward_filter(call: ConvCall, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """cuDNN's backward filter (groups 1): dw (K, C, spatial) from x and dy."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in call.padding])
    dw = np.zeros(call.w_dims)
    for tap, stored in _taps(call, call.w_dims[2:]):
        patch = x[(slice(None), slice(None), *_window(call, tap))]  # n, c, y...
        spatial = tuple(range(2, dy.ndim))
        dw[(...,) + stored] = np.tensordot(dy, patch, axes=((0, *spatial), (0, *spatial)))
    return dw


def unsupported(call: ConvCall) -> str | None:
    """Why real cuDNN supports no algorithm for a (well-formed) descriptor, or None. The rule
    measured on an H200 with cuDNN 9 (full f32): every backward data and backward filter
    algorithm returned CUDNN_STATUS_NOT_SUPPORTED for NHWC-strided activations (x or dy: C
    stride 1, C > 1) with an NCHW filter; hloc describes those with an NHWC filter
    (conv_check.filter_format)."""
    if call.direction == "forward" or call.w_format != "NCHW":
        return None
    if not any(nhwc_strided(dims, steps) for dims, steps in (
            (call.x_dims, call.x_strides), (call.y_dims, call.y_strides))):
        return None
    return f"{call.direction} with NHWC-strided activations and an NCHW filter"


class HostConv:
    """Runs ConvCall descriptors on emulated device memory (cuda_emulated.HostMemory).

    Given the program, it refuses the descriptors cuDNN does not support (`unsupported`) up
    front, as the cuDNN engine does: `runs` is then False for them (hloc's kernel runs, one
    warning), and calling one anyway fails as cuDNN's call would."""

    def __init__(self, memory, program=None):
        self.memory = memory
        self.refused: dict[str, str] = {}
        for t in program.walk() if program is not None else ():
            why = unsupported(t.dnn) if isinstance(t, ConvLaunch) and t.dnn else None
            if why is not None:
                self.refused[t.name] = why
        warn_refused([f"%{name} (cuDNN status {CUDNN_STATUS_NOT_SUPPORTED}: {why})"
                      for name, why in self.refused.items()])

    def runs(self, name: str) -> bool:
        return name not in self.refused

    def __call__(self, call: ConvCall, name: str) -> None:
        from .driver import CudaError

        check_conv(call, name)
        why = unsupported(call)
        if why is not None:
            raise CudaError(f"{DIRECTIONS[call.direction].run} for %{name} failed (cuDNN "
                            f"status {CUDNN_STATUS_NOT_SUPPORTED}: not supported, {why})")
        view = lambda label, dims, steps, writeable=False: _tensor(  # noqa: E731
            self.memory.view(getattr(call, label)), call.dtype, dims, steps, writeable)
        x = view("x", call.x_dims, call.x_strides, call.direction == "backward_data")
        w = view("w", call.w_dims, filter_strides(call), call.direction == "backward_filter")
        y = view("y", call.y_dims, call.y_strides, call.direction == "forward")
        if call.direction == "backward_data":
            x[...] = backward_data(call, np.array(y), np.array(w)).astype(x.dtype)
        elif call.direction == "backward_filter":
            w[...] = backward_filter(call, np.array(x), np.array(y)).astype(w.dtype)
        else:
            y[...] = convolve(call, np.array(x), np.array(w)).astype(y.dtype)
