"""cuDNN's backward convolutions for HLO convolutions that are gradients (thunks.gpu.ConvCall
with direction backward_data or backward_filter), as XLA's GPU back end runs them.

A training step's backward pass has two kinds of convolution a forward cuDNN call runs badly:

- the input gradient, an lhs-dilated ("transposed") convolution: dilating dy by the forward
  stride leaves most of the input zeros. With s = lhs dilation, d = window dilation, R taps
  and padding lo/hi per spatial dim, HLO computes out[j] = sum of in[i] * K[r] over every
  i, r with j = s*i - r*d + lo. cuDNN's backward data over a forward convolution of stride s,
  dilation d and padding p computes dx[j'] = sum of dy[o] * w[R-1-r] over j' = o*s + r*d - p
  in CUDNN_CONVOLUTION mode, so dy = in, w = K (its K being the HLO kernel's input feature,
  its C the output feature) and p = (R-1)*d - lo: a kernel reversed in every spatial dim
  (rev(param) read through, or window reversal) flips the mode instead;
- the weight gradient, a convolution whose lhs *feature* dim is the reduction (the batch)
  and whose output spatial dims are the filter taps (window size > output size in every
  spatial dim: XLA's "batch as feature" form). out[r] = sum of lhs[r*ws + o*wd - lo] *
  rhs[o] is cuDNN's backward filter dw[r] = sum of x[o*s + r*d - p] * dy[o] with x = lhs (N
  the HLO lhs feature dim, C its batch dim), dy = rhs, s = the HLO window dilation, d = the
  HLO window stride, p = lo.

cuDNN's padding is symmetric and its sizes must be those of a forward convolution (dy's
size is out_size(dx, w, ...)). Where HLO's padding is asymmetric, the written tensor is made
larger, as XLA's padding legalization does: more dx positions (a larger spatial size, the
HLO output starting `offset` positions in) or more filter taps (p = lo + offset * d: the HLO
taps are taps offset... of cuDNN's). That tensor then lies in scratch memory and the epilogue
kernel reads the HLO convolution's window of it (conv_core). cuDNN writes a filter packed only,
and a backward call's filter format follows its activations (conv_check.filter_format: K, taps,
C for NHWC-strided x or dy, jax's usual layout; else K, C, taps): a dw in another layout
(jax's HWIO) goes through scratch as well. Backward data reads the forward kernel converted
into that format first unless it is packed so already (ConvCall.w_strides).

Not handled here (hloc's kernels, or a forward descriptor where conv_dnn finds one): groups,
window strides with lhs dilation, reversal of some spatial dims only, and window geometry no
symmetric padding reproduces.
"""

from __future__ import annotations

from ...ir import Instruction, Opcode, Shape
from ...ir.shape import Layout
from ...runtime.cuda.conv_check import filter_format, out_size
from ...thunks.gpu import ConvCall
from ...util.record import dataclass
from ..elemental.memory import strides
from .conv_dnn import DNN_TYPES, NoDnn, checked_call, operand_strides

MAX_SHIFT = 64  # taps or positions cuDNN's padding may add before the HLO window


@dataclass(frozen=True)
class Written:
    """The array cuDNN's call writes for an HLO convolution: `shape` (the convolution's dims,
    spatial dims enlarged where symmetric padding reaches further) in cuDNN's layout, with
    the convolution's element i at element i + `offsets` of it."""

    direction: str
    shape: Shape
    offsets: tuple[int, ...]
    window: tuple[tuple[int, int, int, int], ...]  # cuDNN (padding, stride, dilation, taps)

    def is_array(self, shape: Shape) -> bool:
        """Whether an array of `shape` is the one cuDNN writes (dims and element strides)."""
        return shape.dims == self.shape.dims and strides(shape) == strides(self.shape)

    def holds(self, shape: Shape) -> bool:
        """Whether cuDNN can write the convolution's result, an array of `shape`, directly
        (enlarged dims imply offsets: then only scratch will do)."""
        return not any(self.offsets) and self.is_array(shape)


def is_weight_gradient(conv: Instruction) -> bool:
    """Whether a convolution has the weight-gradient form: every spatial window larger than
    the output (the output spatial dims are filter taps), no lhs dilation."""
    dn, window = conv.attrs.conv_dnums, conv.attrs.window.dims
    if not window or any(wd.base_dilation != 1 for wd in window):
        return False
    return all(wd.size > conv.shape.dims[d]
               for wd, d in zip(window, dn.output_spatial_dimensions, strict=True))


def is_transposed(conv: Instruction) -> bool:
    return any(wd.base_dilation != 1 for wd in conv.attrs.window.dims)


def scratch_form(conv: Instruction, instr: Instruction) -> Written | None:
    """The array a gradient convolution (of kernel thunk `instr`) has its backward call
    write into scratch memory (its result's layout where cuDNN can write that), or None for
    other convolutions."""
    if not (is_transposed(conv) or is_weight_gradient(conv)):
        return None
    return written(conv, instr, conv.shape)


def written(conv: Instruction, instr: Instruction, out_shape: Shape) -> Written | None:
    """The array a backward call writes for `conv` (of kernel thunk `instr`, whose operands'
    layouts pick a weight gradient's filter format) when its result is wanted in
    `out_shape`'s layout, or None when `conv` is no gradient cuDNN's backward calls express
    (or reads operands in no layout cuDNN is given)."""
    if conv.shape.dtype.name not in DNN_TYPES or (conv.attrs.batch_group_count or 1) != 1 or (
            conv.attrs.feature_group_count or 1) != 1:
        return None
    if not 1 <= len(conv.attrs.window.dims) <= 3:
        return None
    try:
        if is_transposed(conv):
            return _data_written(conv, out_shape)
        if is_weight_gradient(conv):
            return _filter_written(conv, instr)
    except NoDnn:
        return None
    return None


def _data_window(wd, size_in: int, size_out: int) -> tuple[int, int, int]:
    """(cuDNN padding, offset, dx size) of one lhs-dilated spatial dim."""
    if wd.stride != 1:
        raise NoDnn
    s, d, taps = wd.base_dilation, wd.window_dilation, wd.size
    p_lo, p_hi = (taps - 1) * d - wd.padding_low, (taps - 1) * d - wd.padding_high
    pad = min(p_lo, p_hi + s - 1)
    if pad < 0:
        raise NoDnn
    shift = p_lo - pad
    size = max((size_in - 1) * s + (taps - 1) * d + 1 - 2 * pad, shift + size_out)
    if out_size(size, taps, pad, s, d) != size_in or shift > MAX_SHIFT:
        raise NoDnn
    return pad, shift, size


def _data_written(conv: Instruction, out_shape: Shape) -> Written:
    dn = conv.attrs.conv_dnums
    lhs = conv.operands[0].shape
    dims, offsets = list(conv.shape.dims), [0] * conv.shape.rank
    window = []
    for wd, di, do in zip(conv.attrs.window.dims, dn.input_spatial_dimensions,
                          dn.output_spatial_dimensions, strict=True):
        pad, offsets[do], dims[do] = _data_window(wd, lhs.dims[di], conv.shape.dims[do])
        window.append((pad, wd.base_dilation, wd.window_dilation, wd.size))
    shape = Shape.array(conv.shape.element_type, dims, out_shape.layout)
    return Written("backward_data", shape, tuple(offsets), tuple(window))


def _filter_window(wd, size_x: int, size_dy: int, taps: int) -> tuple[int, int, int]:
    """(cuDNN padding, offset, cuDNN taps) of one weight-gradient spatial dim."""
    s, d = wd.window_dilation, wd.stride
    for shift in range(MAX_SHIFT + 1):
        pad = wd.padding_low + shift * d
        if pad < 0:
            continue
        for more in range(taps + shift, taps + shift + s + 1):
            if out_size(size_x, more, pad, s, d) == size_dy:
                return pad, shift, more
    raise NoDnn


def _filter_written(conv: Instruction, instr: Instruction) -> Written:
    dn = conv.attrs.conv_dnums
    if any(wd.window_reversal for wd in conv.attrs.window.dims):
        raise NoDnn
    (_, x), (_, dy) = _filter_operands(conv, instr)
    lhs = conv.operands[0].shape
    dims, offsets = list(conv.shape.dims), [0] * conv.shape.rank
    window = []
    for wd, dx, do in zip(conv.attrs.window.dims, dn.input_spatial_dimensions,
                          dn.output_spatial_dimensions, strict=True):
        pad, offsets[do], dims[do] = _filter_window(wd, lhs.dims[dx], wd.size,
                                                    conv.shape.dims[do])
        window.append((pad, wd.window_dilation, wd.stride, dims[do]))
    # Packed in the format x's and dy's layouts call for: K, taps, C (NHWC) for NHWC-strided
    # activations, which an H200's backward filter took only so; else K, C, taps (NCHW).
    k, c, taps = (dn.output_feature_dimension, dn.output_batch_dimension,
                  list(dn.output_spatial_dimensions))
    nhwc = filter_format("backward_filter", x, dy) == "NHWC"
    order = [k, *taps, c] if nhwc else [k, c, *taps]
    shape = Shape.array(conv.shape.element_type, dims, Layout(tuple(reversed(order))))
    return Written("backward_filter", shape, tuple(offsets), tuple(window))


# ---- the descriptors ----------------------------------------------------------------------

def _rhs_reversed(node: Instruction) -> tuple[Instruction, set[int]]:
    """The operand below reverses of the convolution's kernel, and which kernel dims they
    reverse (an even number of reversals of a dim cancel)."""
    flipped: set[int] = set()
    while node.opcode == Opcode.REVERSE:
        flipped ^= set(node.dimensions)
        node = node.operands[0]
    return node, flipped


def _mode(conv: Instruction, kernel_flipped: set[int]) -> str:
    """cuDNN's mode for a transposed convolution: CONVOLUTION unless the kernel HLO reads is
    reversed (by window reversal or rev(param)) in every spatial dim; NoDnn for a mix."""
    dn = conv.attrs.conv_dnums
    if kernel_flipped - set(dn.kernel_spatial_dimensions):
        raise NoDnn  # a feature dim reversed
    flips = {wd.window_reversal != (d in kernel_flipped)
             for wd, d in zip(conv.attrs.window.dims, dn.kernel_spatial_dimensions, strict=True)}
    if len(flips) != 1:
        raise NoDnn
    return "cross_correlation" if flips.pop() else "convolution"


def _order(steps: list[int], dims: list[int]) -> tuple[int, ...]:
    return tuple(steps[d] for d in dims)


def backward_call(instr: Instruction, conv: Instruction, operand_slices, out_slice,
                  out_shape: Shape) -> ConvCall:
    """The backward cuDNN call of gradient convolution `conv` of kernel thunk `instr` writing
    `out_slice`, an array of `out_shape` (the convolution's Written shape, or the thunk's
    output when that is it); NoDnn when there is none."""
    form = written(conv, instr, out_shape)
    if form is None or not form.is_array(out_shape):
        raise NoDnn
    if form.direction == "backward_data":
        return _data_call(instr, conv, operand_slices, out_slice, form)
    return _filter_call(instr, conv, operand_slices, out_slice, form)


def _data_call(instr, conv, operand_slices, out_slice, form: Written) -> ConvCall:
    dn = conv.attrs.conv_dnums
    lhs, rhs = conv.operands
    rhs_below, flipped = _rhs_reversed(rhs)
    mode = _mode(conv, flipped)
    (yp, ys), (wp, ws) = operand_strides(lhs, instr), operand_strides(rhs_below, instr)
    y_order = [dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions]
    w_order = [dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension,
               *dn.kernel_spatial_dimensions]
    x_order = [dn.output_batch_dimension, dn.output_feature_dimension,
               *dn.output_spatial_dimensions]
    pads, steps, dilations, _ = zip(*form.window, strict=True)
    return checked_call(
        out_slice, operand_slices[wp], operand_slices[yp], conv.shape.dtype.name,
        x=(_order(list(form.shape.dims), x_order), _order(strides(form.shape), x_order)),
        y=(_order(list(lhs.shape.dims), y_order), _order(ys, y_order)),
        w=(_order(list(rhs.shape.dims), w_order), _order(ws, w_order)),
        window=(pads, steps, dilations), direction="backward_data", mode=mode)


def _filter_operands(conv: Instruction, instr: Instruction):
    """A weight gradient's x (the HLO lhs) and dy (rhs) as (parameter number, (dims,
    strides) in cuDNN's N, C, spatial order); NoDnn unless both are read in place."""
    dn = conv.attrs.conv_dnums
    x_order = [dn.input_feature_dimension, dn.input_batch_dimension, *dn.input_spatial_dimensions]
    y_order = [dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension,
               *dn.kernel_spatial_dimensions]
    out = []
    for node, order in zip(conv.operands, (x_order, y_order), strict=True):
        number, steps = operand_strides(node, instr)
        out.append((number, (_order(list(node.shape.dims), order), _order(steps, order))))
    return out


def _filter_call(instr, conv, operand_slices, out_slice, form: Written) -> ConvCall:
    dn = conv.attrs.conv_dnums
    (xp, x), (yp, dy) = _filter_operands(conv, instr)
    w_order = [dn.output_feature_dimension, dn.output_batch_dimension,
               *dn.output_spatial_dimensions]
    pads, steps, dilations, _ = zip(*form.window, strict=True)
    return checked_call(
        operand_slices[xp], out_slice, operand_slices[yp], conv.shape.dtype.name, x=x, y=dy,
        w=(_order(list(form.shape.dims), w_order), _order(strides(form.shape), w_order)),
        window=(pads, steps, dilations), direction="backward_filter")
