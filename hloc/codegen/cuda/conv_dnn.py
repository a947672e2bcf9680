"""The cuDNN form of a convolution of parameters (thunks.gpu.ConvCall).

A kernel thunk whose computation is one convolution of parameters (or of transposes of
parameters: a transpose only permutes strides) can also run as one cuDNN forward convolution,
which the runtime may use instead of the kernel (HLOC_CUDA_CONV): the thunk's own
convolution (`conv_call`), or the core of a fusion with an elementwise epilogue, computed
into scratch memory that the epilogue kernel reads (`core_call`, used by conv_core). The HLO
dimension numbers become cuDNN's N, C, spatial order; each array's layout becomes explicit
element strides (cudnnSetTensorNdDescriptor takes any strides). cuDNN's legacy filter
descriptor only knows packed K,C,spatial ("NCHW") and K,spatial,C ("NHWC") filters. A
forward call's filter is NCHW (cuDNN 9 refused OHWI filters with full-f32 FMA math on an
H200); a backward call's filter is NHWC when its activations are NHWC-strided (features
innermost, as jax lays them out: that H200 supported no backward algorithm for those with an
NCHW filter), else NCHW (conv_check.filter_format). A kernel packed in its call's format is
described as it is, any other layout (jax's HWIO, OIHW for an NHWC call, ...) by its strides
(`w_strides`), which the runtime converts to that packed format before convolving.

Gradients get cuDNN's backward calls instead (conv_bwd): lhs-dilated convolutions backward
data, weight-gradient-shaped ones backward filter (a weight gradient those cannot express
falls back to a forward descriptor here). `checked_call` builds every direction's ConvCall.

Not expressible, so no descriptor (hloc's kernel as before): batch groups, window reversal
(forward), negative padding, padding that differs between the two sides of a dim unless
cuDNN's symmetric padding with the low amount gives the same output size (then the extra
high padding is never read), more than 3 or no spatial dims, mixed or other element types
(f32, f16, bf16 only), and sizes past a C int.
"""

from __future__ import annotations

from ...ir import Instruction, Opcode
from ...thunks.gpu import ConvCall
from ..elemental.memory import strides
from .gemm import parameter_strides
from .kernel import kernel_computation

DNN_TYPES = ("f32", "f16", "bf16")  # x, w and y the same type; accumulation in f32
_INT_MAX = 2**31 - 1


class NoDnn(Exception):
    """The convolution has no cuDNN form."""


def operand_strides(node: Instruction, instr: Instruction) -> tuple[int, list[int]]:
    """(parameter number, element strides) of a convolution operand read in place."""
    found = parameter_strides(node, instr)
    if found is None:
        raise NoDnn
    return found


def _packed(dims, steps, order) -> bool:
    """Whether dims `order` (outermost first) are packed in that order (unit dims may have
    any stride)."""
    expected = 1
    for d in reversed(order):
        if dims[d] > 1 and steps[d] != expected:
            return False
        expected *= dims[d]
    return True


def _filter_strides(dims, steps, w_format: str, direction: str) -> tuple[int, ...]:
    """`w_strides` of a K, C, spatial filter with these strides described in `w_format`:
    none when it is packed that way (cuDNN reads or writes it in place), else its strides
    (the runtime converts the filter into a packed copy first); NoDnn for a written filter
    (backward_filter) not packed in its format."""
    from ...runtime.cuda.conv_check import filter_order

    if _packed(dims, steps, filter_order(w_format, len(dims))):
        return ()
    if direction == "backward_filter":
        raise NoDnn
    return tuple(steps)


def _window(conv: Instruction, x_spatial: list[int], y_spatial: list[int]):
    """(padding, strides, dilations) of cuDNN's symmetric window (raises NoDnn)."""
    pads, steps, dilations = [], [], []
    for wd, size, out in zip(conv.attrs.window.dims, x_spatial, y_spatial, strict=True):
        if wd.base_dilation != 1 or wd.window_reversal or min(wd.padding_low,
                                                              wd.padding_high) < 0:
            raise NoDnn
        span = size + 2 * wd.padding_low - ((wd.size - 1) * wd.window_dilation + 1)
        if span < 0 or span // wd.stride + 1 != out:
            raise NoDnn  # asymmetric padding cuDNN's symmetric form does not reproduce
        pads.append(wd.padding_low)
        steps.append(wd.stride)
        dilations.append(wd.window_dilation)
    return pads, steps, dilations


def _unit_spatial(dims, steps) -> tuple[list[int], list[int]]:
    """A 1-D convolution's tensor as 2-D: a unit spatial dim before the first, strided as
    if it were one more dim just outside it (so a packed layout stays packed)."""
    return [*dims[:2], 1, *dims[2:]], [*steps[:2], steps[2] * dims[2], *steps[2:]]


def _tensor(shape_dims, steps, batch: int, feature: int, spatial) -> tuple[list, list]:
    order = [batch, feature, *spatial]
    return [shape_dims[d] for d in order], [steps[d] for d in order]


def conv_call(instr: Instruction, operand_slices, output_slices) -> ConvCall | None:
    """The cuDNN form of a kernel thunk's instruction when it is a plain convolution of
    parameters (or of transposed parameters) with no fused epilogue, cuDNN writing the
    thunk's output directly, else None."""
    conv = kernel_computation(instr).root
    if conv.opcode != Opcode.CONVOLUTION:
        return None
    if len(operand_slices) != len(instr.operands) or len(output_slices) != 1:
        return None
    if not instr.shape.is_array or instr.shape.dims != conv.shape.dims:
        return None
    return core_call(instr, conv, operand_slices, output_slices[0], instr.shape)


def core_call(instr: Instruction, conv: Instruction, operand_slices, out_slice,
              out_shape) -> ConvCall | None:
    """The cuDNN form of convolution `conv` of kernel thunk `instr` (one of its kernel
    computation's instructions) writing `out_slice`, an array of `out_shape` (conv's dims,
    or for a backward call the enlarged dims of conv_bwd.written, in out_shape's layout), or
    None when cuDNN cannot express it. Gradients (transposed and weight-gradient
    convolutions) get cuDNN's backward calls (conv_bwd); a weight gradient those cannot
    express, and every other convolution, a forward one."""
    from .conv_bwd import backward_call, is_transposed, is_weight_gradient

    if len(operand_slices) != len(instr.operands):
        return None
    try:
        if is_transposed(conv) or is_weight_gradient(conv):
            return backward_call(instr, conv, operand_slices, out_slice, out_shape)
    except NoDnn:
        if is_transposed(conv):
            return None
    try:
        return _call(instr, conv, operand_slices, out_slice, out_shape)
    except NoDnn:
        return None


def _call(instr: Instruction, conv: Instruction, operand_slices, out_slice,
          out_shape) -> ConvCall:
    lhs, rhs = conv.operands
    dtype = conv.shape.dtype.name
    if dtype not in DNN_TYPES or {lhs.shape.dtype.name, rhs.shape.dtype.name} != {dtype}:
        raise NoDnn
    if (conv.attrs.batch_group_count or 1) != 1:
        raise NoDnn
    dn = conv.attrs.conv_dnums
    (xp, xs), (wp, ws) = (operand_strides(o, instr) for o in (lhs, rhs))
    x = _tensor(lhs.shape.dims, xs, dn.input_batch_dimension, dn.input_feature_dimension,
                dn.input_spatial_dimensions)
    y = _tensor(conv.shape.dims, strides(out_shape), dn.output_batch_dimension,
                dn.output_feature_dimension, dn.output_spatial_dimensions)
    w = _tensor(rhs.shape.dims, ws, dn.kernel_output_feature_dimension,
                dn.kernel_input_feature_dimension, dn.kernel_spatial_dimensions)
    if not 1 <= len(dn.input_spatial_dimensions) <= 3:
        raise NoDnn
    window = _window(conv, x[0][2:], y[0][2:])
    return checked_call(operand_slices[xp], operand_slices[wp], out_slice, dtype, x=x, y=y,
                        w=w, window=window, groups=conv.attrs.feature_group_count or 1)


def checked_call(x_slice, w_slice, y_slice, dtype: str, x, y, w, window, groups: int = 1,
                 direction: str = "forward", mode: str = "cross_correlation") -> ConvCall:
    """A ConvCall from cuDNN-ordered (dims, strides) of x, y and the filter w (K, C,
    spatial) and the window's (paddings, strides, dilations): a 1-D convolution gets a unit
    spatial dim, the filter the format the activations call for (conv_check.filter_format:
    NHWC for a backward call with NHWC-strided activations, else NCHW); NoDnn past a C int
    or with a size cuDNN's forward geometry does not give."""
    from ...runtime.cuda.conv_check import filter_format, out_size

    if dtype not in DNN_TYPES:
        raise NoDnn
    (x_dims, x_steps), (y_dims, y_steps), (w_dims, w_steps) = (
        (list(d), list(s)) for d, s in (x, y, w))
    pads, steps, dilations = (list(v) for v in window)
    if len(x_dims) == 3:
        (x_dims, x_steps), (y_dims, y_steps), (w_dims, w_steps) = (
            _unit_spatial(d, s) for d, s in ((x_dims, x_steps), (y_dims, y_steps),
                                             (w_dims, w_steps)))
        pads, steps, dilations = [0, *pads], [1, *steps], [1, *dilations]
    if not 4 <= len(x_dims) <= 5 or min(x_dims + y_dims + w_dims) < 1:
        raise NoDnn
    w_format = filter_format(direction, (x_dims, x_steps), (y_dims, y_steps))
    w_strides = _filter_strides(w_dims, w_steps, w_format, direction)
    shapes = ((x_dims, x_steps), (y_dims, y_steps), (w_dims, w_steps))
    reach = [sum((d - 1) * s for d, s in zip(dims, st, strict=True)) + 1 for dims, st in shapes]
    if max(reach + x_dims + y_dims + w_dims) > _INT_MAX:
        raise NoDnn
    if [out_size(*v) for v in zip(x_dims[2:], w_dims[2:], pads, steps, dilations,
                                  strict=True)] != y_dims[2:]:
        raise NoDnn
    return ConvCall(x_slice, w_slice, y_slice, dtype=dtype, compute="f32",
                    x_dims=tuple(x_dims), x_strides=tuple(x_steps), w_dims=tuple(w_dims),
                    w_format=w_format, y_dims=tuple(y_dims), y_strides=tuple(y_steps),
                    padding=tuple(pads), window_strides=tuple(steps),
                    dilation=tuple(dilations), groups=groups, w_strides=w_strides,
                    direction=direction, mode=mode)


def holds_convolution(instr: Instruction) -> bool:
    """Whether a kernel thunk's instruction is a convolution or a fusion that holds one."""
    if instr.opcode == Opcode.CONVOLUTION:
        return True
    return instr.opcode == Opcode.FUSION and any(
        i.opcode == Opcode.CONVOLUTION for i in instr.fused_computation().instructions)
