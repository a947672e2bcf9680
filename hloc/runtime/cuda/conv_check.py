"""Checks of cuDNN descriptors (hloc.thunks.gpu.ConvCall) before anything runs them: a
damaged or hand-edited gpu_thunks.json must not make cuDNN (or the emulator's stand-in) read
or write outside a buffer, nor run a call with fields it does not define. The bundle
validator, the cuDNN engine and hloc.runtime.cuda.host_conv all check through `check_conv`.
"""

from __future__ import annotations

from ...errors import InputError
from ...ir import dtypes
from ...thunks.gpu import DNN_DIRECTIONS, DNN_MODES, ConvCall

DATA_TYPES = ("f32", "f16", "bf16")
FILTER_FORMATS = ("NCHW", "NHWC")


def _ints(values, low: int) -> bool:
    return all(type(v) is int and low <= v < 2**31 for v in values)


def out_size(size: int, filt: int, pad: int, stride: int, dilation: int) -> int:
    """cuDNN's output size of one spatial dim (cudnnGetConvolutionNdForwardOutputDim)."""
    span = size + 2 * pad - ((filt - 1) * dilation + 1)
    return span // stride + 1 if span >= 0 else 0


def filter_strides(call: ConvCall) -> tuple[int, ...]:
    """Element strides of the filter's K, C, spatial dims in its slice: `w_strides` when the
    filter is converted before convolving, else those of its packed format."""
    return call.w_strides or packed_filter_strides(call)


def packed_filter_strides(call: ConvCall) -> tuple[int, ...]:
    """Element strides of the filter's K, C, spatial dims packed in `w_format` (the layout
    cuDNN convolves: the slice's own, or the converted copy's)."""
    dims = call.w_dims
    order = (list(range(len(dims))) if call.w_format == "NCHW"
             else [0, *range(2, len(dims)), 1])
    out, step = [0] * len(dims), 1
    for d in reversed(order):
        out[d] = step
        step *= dims[d]
    return tuple(out)


def _reach(dims, steps) -> int:
    return sum((d - 1) * s for d, s in zip(dims, steps, strict=True)) + 1


def _well_formed(call: ConvCall) -> bool:
    nd = len(call.x_dims)
    shapes = (call.x_dims, call.x_strides, call.w_dims, call.y_dims, call.y_strides)
    window = (call.padding, call.window_strides, call.dilation)
    if nd not in (4, 5) or any(len(v) != nd for v in shapes) or any(
            len(v) != nd - 2 for v in window):
        return False
    if call.dtype not in DATA_TYPES or call.compute != "f32" or (
            call.w_format not in FILTER_FORMATS):
        return False
    if call.direction not in DNN_DIRECTIONS or call.mode not in DNN_MODES:
        return False
    if call.direction != "forward" and (call.groups != 1 or (
            call.direction == "backward_filter" and call.w_strides != ())):
        return False  # hloc writes no grouped backward call; dw is written packed
    if type(call.w_strides) is not tuple or len(call.w_strides) not in (0, nd) or (
            call.w_strides and (call.w_format != "NCHW" or not _ints(call.w_strides, 1))):
        return False
    return (all(_ints(v, 1) for v in shapes) and _ints(call.padding, 0)
            and _ints(call.window_strides + call.dilation, 1) and _ints((call.groups,), 1))


def _consistent(call: ConvCall) -> bool:
    (n, c, *xs), (k, cg, *ws), (yn, yk, *ys) = call.x_dims, call.w_dims, call.y_dims
    if n != yn or k != yk or c != cg * call.groups or k % call.groups:
        return False
    return all(out_size(*v) == y for v, y in zip(
        zip(xs, ws, call.padding, call.window_strides, call.dilation, strict=True), ys,
        strict=True))


def check_conv(call: ConvCall, name: str) -> None:
    """InputError unless the descriptor is well formed (a known direction and mode; a
    backward call ungrouped, a written filter packed), its sizes agree (channels, groups,
    cuDNN's output size: every direction uses the forward convolution's geometry) and every
    tensor it touches lies inside its slice."""
    if not _well_formed(call) or not _consistent(call):
        raise InputError(f"gpu_thunks.json: bad cuDNN descriptor for %{name}")
    size = dtypes.info(dtypes.from_name(call.dtype)).byte_size
    for label, dims, steps, s in (("x", call.x_dims, call.x_strides, call.x),
                                  ("w", call.w_dims, filter_strides(call), call.w),
                                  ("y", call.y_dims, call.y_strides, call.y)):
        if _reach(dims, steps) * size > s.size:
            raise InputError(f"gpu_thunks.json: cuDNN descriptor for %{name} reaches past "
                             f"its {label} slice")
