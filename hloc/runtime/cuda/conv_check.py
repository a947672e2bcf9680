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


def nhwc_strided(dims, steps) -> bool:
    """Whether an N, C, spatial tensor (dims and element strides) keeps its features
    innermost: C stride 1 with more than one feature (NHWC-like, jax's usual layout)."""
    return dims[1] > 1 and steps[1] == 1


def filter_format(direction: str, x, y) -> str:
    """The filter format hloc describes a call with, from its activations x and y ((dims,
    strides), N, C, spatial order): "NHWC" (K, spatial, C) for a backward call whose x or dy
    is NHWC-strided, else "NCHW" (K, C, spatial). On an H200 (cuDNN 9, full f32) no
    backward data or backward filter algorithm supports NHWC-strided activations with an
    NCHW filter, while the same calls with an NHWC filter have a deterministic one (ALGO_1);
    forward calls take an NCHW filter with either activation layout, and NCHW-packed
    activations with an NCHW filter run in every direction."""
    if direction != "forward" and any(nhwc_strided(*t) for t in (x, y)):
        return "NHWC"
    return "NCHW"


def filter_order(w_format: str, nd: int) -> list[int]:
    """The filter's K, C, spatial dims (0, 1, 2, ...) outermost first as `w_format` packs
    them."""
    return list(range(nd)) if w_format == "NCHW" else [0, *range(2, nd), 1]


def filter_strides(call: ConvCall) -> tuple[int, ...]:
    """Element strides of the filter's K, C, spatial dims in its slice: `w_strides` when the
    filter is converted before convolving, else those of its packed format."""
    return call.w_strides or packed_filter_strides(call)


def packed_filter_strides(call: ConvCall) -> tuple[int, ...]:
    """Element strides of the filter's K, C, spatial dims packed in `w_format` (the layout
    cuDNN convolves: the slice's own, or the converted copy's)."""
    dims = call.w_dims
    out, step = [0] * len(dims), 1
    for d in reversed(filter_order(call.w_format, len(dims))):
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
    if call.direction != "forward" and call.groups != 1:
        return False  # hloc writes no grouped backward call
    return (_filter_well_formed(call) and all(_ints(v, 1) for v in shapes)
            and _ints(call.padding, 0) and _ints(call.window_strides + call.dilation, 1)
            and _ints((call.groups,), 1))


def _filter_well_formed(call: ConvCall) -> bool:
    """The packed-filter rules: a written filter (backward filter) is packed in its format,
    never strided; a read one may be converted from its strides into packed NCHW (forward,
    where an H200 refused NHWC filters with full f32) or into the call's format (backward
    data, NCHW or NHWC)."""
    if type(call.w_strides) is not tuple or len(call.w_strides) not in (0, len(call.x_dims)):
        return False
    if not call.w_strides:
        return True
    allowed = {"forward": ("NCHW",), "backward_data": FILTER_FORMATS}.get(call.direction, ())
    return call.w_format in allowed and _ints(call.w_strides, 1)


def _consistent(call: ConvCall) -> bool:
    (n, c, *xs), (k, cg, *ws), (yn, yk, *ys) = call.x_dims, call.w_dims, call.y_dims
    if n != yn or k != yk or c != cg * call.groups or k % call.groups:
        return False
    return all(out_size(*v) == y for v, y in zip(
        zip(xs, ws, call.padding, call.window_strides, call.dilation, strict=True), ys,
        strict=True))


def check_conv(call: ConvCall, name: str) -> None:
    """InputError unless the descriptor is well formed (a known direction and mode; a
    backward call ungrouped; the packed-filter rules of `_filter_well_formed`), its sizes
    agree (channels, groups, cuDNN's output size: every direction uses the forward
    convolution's geometry) and every tensor it touches lies inside its slice."""
    if not _well_formed(call) or not _consistent(call):
        raise InputError(f"gpu_thunks.json: bad cuDNN descriptor for %{name}")
    size = dtypes.info(dtypes.from_name(call.dtype)).byte_size
    for label, dims, steps, s in (("x", call.x_dims, call.x_strides, call.x),
                                  ("w", call.w_dims, filter_strides(call), call.w),
                                  ("y", call.y_dims, call.y_strides, call.y)):
        if _reach(dims, steps) * size > s.size:
            raise InputError(f"gpu_thunks.json: cuDNN descriptor for %{name} reaches past "
                             f"its {label} slice")
