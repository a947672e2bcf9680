"""The cuDNN form of a plain convolution (thunks.gpu.ConvCall).

A kernel thunk whose computation is one convolution of parameters (or of transposes of
parameters: a transpose only permutes strides) with no fused producer or epilogue can also
run as one cuDNN forward convolution, which the runtime may use instead of the kernel
(HLOC_CUDA_CONV). The HLO dimension numbers become cuDNN's N, C, spatial order; each array's
layout becomes explicit element strides (cudnnSetTensorNdDescriptor takes any strides), except
the filter's: cuDNN's legacy filter descriptor only knows packed K,C,spatial ("NCHW") and
K,spatial,C ("NHWC"), so any other kernel layout (jax's HWIO among them) gets no descriptor.

Not expressible, so no descriptor (hloc's kernel as before): batch groups, lhs (base)
dilation, window reversal, negative padding, padding that differs between the two sides of a
dim unless cuDNN's symmetric padding with the low amount gives the same output size (then
the extra high padding is never read), more than 3 or no spatial dims, mixed or other element
types (f32, f16, bf16 only), and sizes past a C int.
"""

from __future__ import annotations

from ...ir import Instruction, Opcode
from ...thunks.gpu import ConvCall
from ..elemental.memory import strides
from .kernel import kernel_computation

DNN_TYPES = ("f32", "f16", "bf16")  # x, w and y the same type; accumulation in f32
_INT_MAX = 2**31 - 1


class _NoDnn(Exception):
    """The convolution has no cuDNN form."""


def _operand_strides(node: Instruction, instr: Instruction) -> tuple[int, list[int]]:
    """(parameter number, element stride of each dim) of an operand that is a parameter of
    the kernel computation or transposes of one."""
    perms = []
    while node.opcode == Opcode.TRANSPOSE:
        perms.append(node.dimensions)
        node = node.operands[0]
    if node.opcode != Opcode.PARAMETER:
        raise _NoDnn
    number = node.attrs.parameter_number
    steps = strides(instr.operands[number].shape)
    for perm in reversed(perms):
        steps = [steps[d] for d in perm]
    return number, steps


def _packed(dims: list[int], steps: list[int], order: list[int]) -> bool:
    """Whether dims `order` (outermost first) are packed in that order (unit dims may have
    any stride)."""
    expected = 1
    for d in reversed(order):
        if dims[d] > 1 and steps[d] != expected:
            return False
        expected *= dims[d]
    return True


def _filter_format(dims: list[int], steps: list[int], dn) -> str:
    k, c, sp = (dn.kernel_output_feature_dimension, dn.kernel_input_feature_dimension,
                list(dn.kernel_spatial_dimensions))
    if _packed(dims, steps, [k, c, *sp]):
        return "NCHW"
    if _packed(dims, steps, [k, *sp, c]):
        return "NHWC"
    raise _NoDnn


def _window(conv: Instruction, x_spatial: list[int], y_spatial: list[int]):
    """(padding, strides, dilations) of cuDNN's symmetric window (raises _NoDnn)."""
    pads, steps, dilations = [], [], []
    for wd, size, out in zip(conv.attrs.window.dims, x_spatial, y_spatial, strict=True):
        if wd.base_dilation != 1 or wd.window_reversal or min(wd.padding_low,
                                                              wd.padding_high) < 0:
            raise _NoDnn
        span = size + 2 * wd.padding_low - ((wd.size - 1) * wd.window_dilation + 1)
        if span < 0 or span // wd.stride + 1 != out:
            raise _NoDnn  # asymmetric padding cuDNN's symmetric form does not reproduce
        pads.append(wd.padding_low)
        steps.append(wd.stride)
        dilations.append(wd.window_dilation)
    return pads, steps, dilations


def _unit_spatial(dims: list[int], steps: list[int]) -> tuple[list[int], list[int]]:
    """A 1-D convolution's tensor as 2-D: a unit spatial dim before the first, strided as
    if it were one more dim just outside it (so a packed layout stays packed)."""
    return [*dims[:2], 1, *dims[2:]], [*steps[:2], steps[2] * dims[2], *steps[2:]]


def _tensor(shape_dims, steps, batch: int, feature: int, spatial) -> tuple[list, list]:
    order = [batch, feature, *spatial]
    return [shape_dims[d] for d in order], [steps[d] for d in order]


def conv_call(instr: Instruction, operand_slices, output_slices) -> ConvCall | None:
    """The cuDNN form of a kernel thunk's instruction when it is a plain convolution of
    parameters (or of transposed parameters) with no fused epilogue, else None."""
    conv = kernel_computation(instr).root
    if conv.opcode != Opcode.CONVOLUTION:
        return None
    if len(operand_slices) != len(instr.operands) or len(output_slices) != 1:
        return None
    if not instr.shape.is_array or instr.shape.dims != conv.shape.dims:
        return None
    try:
        return _call(instr, conv, operand_slices, output_slices[0])
    except _NoDnn:
        return None


def _call(instr: Instruction, conv: Instruction, operand_slices, out_slice) -> ConvCall:
    lhs, rhs = conv.operands
    dtype = conv.shape.dtype.name
    if dtype not in DNN_TYPES or {lhs.shape.dtype.name, rhs.shape.dtype.name} != {dtype}:
        raise _NoDnn
    if (conv.attrs.batch_group_count or 1) != 1:
        raise _NoDnn
    dn = conv.attrs.conv_dnums
    rank = len(dn.input_spatial_dimensions)
    if not 1 <= rank <= 3:
        raise _NoDnn
    (xp, xs), (wp, ws) = (_operand_strides(o, instr) for o in (lhs, rhs))
    x_dims, x_steps = _tensor(lhs.shape.dims, xs, dn.input_batch_dimension,
                              dn.input_feature_dimension, dn.input_spatial_dimensions)
    y_dims, y_steps = _tensor(conv.shape.dims, strides(instr.shape), dn.output_batch_dimension,
                              dn.output_feature_dimension, dn.output_spatial_dimensions)
    w_format = _filter_format(list(rhs.shape.dims), ws, dn)
    w_dims = [rhs.shape.dims[d] for d in (dn.kernel_output_feature_dimension,
                                          dn.kernel_input_feature_dimension,
                                          *dn.kernel_spatial_dimensions)]
    pads, steps, dilations = _window(conv, x_dims[2:], y_dims[2:])
    if rank == 1:
        (x_dims, x_steps), (y_dims, y_steps) = (_unit_spatial(x_dims, x_steps),
                                                _unit_spatial(y_dims, y_steps))
        w_dims = [*w_dims[:2], 1, *w_dims[2:]]
        pads, steps, dilations = [0, *pads], [1, *steps], [1, *dilations]
    if min(x_dims + y_dims + w_dims) < 1:
        raise _NoDnn
    reach = [sum((d - 1) * s for d, s in zip(dims, st, strict=True)) + 1
             for dims, st in ((x_dims, x_steps), (y_dims, y_steps))]
    if max(reach + x_dims + y_dims + w_dims) > _INT_MAX:
        raise _NoDnn
    return ConvCall(operand_slices[xp], operand_slices[wp], out_slice, dtype=dtype,
                    compute="f32", x_dims=tuple(x_dims), x_strides=tuple(x_steps),
                    w_dims=tuple(w_dims), w_format=w_format, y_dims=tuple(y_dims),
                    y_strides=tuple(y_steps), padding=tuple(pads), window_strides=tuple(steps),
                    dilation=tuple(dilations), groups=conv.attrs.feature_group_count or 1)


def holds_convolution(instr: Instruction) -> bool:
    """Whether a kernel thunk's instruction is a convolution or a fusion that holds one."""
    if instr.opcode == Opcode.CONVOLUTION:
        return True
    return instr.opcode == Opcode.FUSION and any(
        i.opcode == Opcode.CONVOLUTION for i in instr.fused_computation().instructions)
