"""Opcode-specific attribute printing (XLA's PrintExtraAttributesImpl) and the enum spellings
shared by the HLO text printer and parser."""

from __future__ import annotations

from collections.abc import Callable

from ...registry import Registry
from .. import dtypes
from ..attrs import (
    ConvDimensionNumbers,
    DotDimensionNumbers,
    GatherDimensionNumbers,
    PaddingDim,
    PrecisionConfig,
    ScatterDimensionNumbers,
    Window,
)
from ..dtypes import PrimitiveType
from ..instruction import Instruction
from ..opcodes import Opcode as O
from ..shape import Shape
from .lexer import c_escape, lexes_as_json_dict
from .literal_text import format_literal, format_scalar

UNBOUNDED = -(1 << 63)  # XLA's kUnboundedSize, printed as '?'

# ---- enum spellings (value in Attrs/proto <-> HLO text) ---------------------------------
PRECISION_NAMES = {0: "default", 1: "high", 2: "highest", 3: "packed_nibble"}
ALGORITHM_NAMES = dict(enumerate([
    "unset", "dot_any_f8_any_f8_f32", "dot_any_f8_any_f8_f32_fast_accum", "dot_f16_f16_f16",
    "dot_f16_f16_f32", "dot_bf16_bf16_bf16", "dot_bf16_bf16_f32", "dot_bf16_bf16_f32_x3",
    "dot_bf16_bf16_f32_x6", "dot_tf32_tf32_f32", "dot_tf32_tf32_f32_x3", "dot_f32_f32_f32",
    "dot_f64_f64_f64", "dot_bf16_bf16_f32_x9"]))
DISTRIBUTION_NAMES = {1: "rng_uniform", 2: "rng_normal"}
RNG_ALGORITHM_NAMES = {0: "rng_default", 1: "rng_three_fry", 2: "rng_philox"}
FFT_NAMES = {0: "FFT", 1: "IFFT", 2: "RFFT", 3: "IRFFT"}
TRANSPOSE_NAMES = {1: "NO_TRANSPOSE", 2: "TRANSPOSE", 3: "ADJOINT"}
API_VERSION_NAMES = {1: "API_VERSION_ORIGINAL", 2: "API_VERSION_STATUS_RETURNING",
                     3: "API_VERSION_STATUS_RETURNING_UNIFIED", 4: "API_VERSION_TYPED_FFI"}
FUSION_KINDS = ("kLoop", "kInput", "kOutput", "kCustom")
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
COMPARISON_TYPES = ("FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED")


def default_comparison_type(ptype: PrimitiveType) -> str:
    """XLA's Comparison::DefaultComparisonType for an operand element type."""
    info = dtypes.info(ptype)
    if info.is_float or info.is_complex:
        return "FLOAT"
    return "SIGNED" if info.is_signed_int else "UNSIGNED"


# ---- shapes (ShapeUtil::HumanString) --------------------------------------------------------------------------
_SHAPE_CACHE: dict[tuple[Shape, bool], str] = {}


def shape_text(shape: Shape, layout: bool = True) -> str:
    """XLA's ShapeUtil::HumanString[WithLayout]: tuples get `/*index=N*/` every 5 elements."""
    key = (shape, layout)
    text = _SHAPE_CACHE.get(key)
    if text is None:
        text = _shape_text(shape, layout)
        if len(_SHAPE_CACHE) < 100_000:
            _SHAPE_CACHE[key] = text
    return text


def _shape_text(shape: Shape, layout: bool) -> str:
    if shape.is_tuple:
        items = []
        for i, sub in enumerate(shape.tuple_shapes):
            prefix = f"/*index={i}*/" if i and i % 5 == 0 else ""
            items.append(prefix + shape_text(sub, layout))
        return "(" + ", ".join(items) + ")"
    name = dtypes.name(shape.element_type)
    if not shape.is_array:
        return f"{name}[]"
    dims = []
    for i, d in enumerate(shape.dims):
        dynamic = i < len(shape.dynamic_dims) and shape.dynamic_dims[i]
        dims.append("?" if d == UNBOUNDED else f"<={d}" if dynamic else str(d))
    text = f"{name}[{','.join(dims)}]"
    lay = shape.layout
    if layout and lay is not None and (shape.rank > 0 or lay.tiles or lay.memory_space):
        text += lay.to_text()
    return text


# ---- value formatting -----------------------------------------------------------------------
def ints(values) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def format_window(window: Window) -> str:
    dims = window.dims
    parts = ["size=" + "x".join(str(d.size) for d in dims)]
    if any(d.stride != 1 for d in dims):
        parts.append("stride=" + "x".join(str(d.stride) for d in dims))
    if any(d.padding_low or d.padding_high for d in dims):
        parts.append("pad=" + "x".join(f"{d.padding_low}_{d.padding_high}" for d in dims))
    if any(d.base_dilation != 1 for d in dims):
        parts.append("lhs_dilate=" + "x".join(str(d.base_dilation) for d in dims))
    if any(d.window_dilation != 1 for d in dims):
        parts.append("rhs_dilate=" + "x".join(str(d.window_dilation) for d in dims))
    if any(d.window_reversal for d in dims):
        parts.append("rhs_reversal=" + "x".join("1" if d.window_reversal else "0" for d in dims))
    return " ".join(parts)


def format_dim_labels(d: ConvDimensionNumbers) -> str:
    def labels(first: int, first_c: str, second: int, second_c: str, spatial) -> str:
        size = max([first, second, *spatial]) + 1
        out = ["?"] * size
        out[first], out[second] = first_c, second_c
        for i, s in enumerate(spatial):
            out[s] = str(i)
        return "".join(out)

    lhs = labels(d.input_batch_dimension, "b", d.input_feature_dimension, "f",
                 d.input_spatial_dimensions)
    rhs = labels(d.kernel_input_feature_dimension, "i", d.kernel_output_feature_dimension, "o",
                 d.kernel_spatial_dimensions)
    out = labels(d.output_batch_dimension, "b", d.output_feature_dimension, "f",
                 d.output_spatial_dimensions)
    return f"{lhs}_{rhs}->{out}"


def format_padding(padding: tuple[PaddingDim, ...]) -> str:
    interior = any(p.interior for p in padding)
    return "x".join(f"{p.low}_{p.high}" + (f"_{p.interior}" if interior else "") for p in padding)


def format_frontend_attributes(items) -> str:
    def value(v: str) -> str:
        return v if lexes_as_json_dict(v) else f'"{c_escape(v)}"'
    return "{" + ",".join(f"{k}={value(v)}" for k, v in sorted(items)) + "}"


def format_aliasing(aliasing) -> str:
    return "{" + ", ".join(f"{ints(a.output_shape_index)}: ({a.operand_index}, "
                           f"{ints(a.operand_shape_index)})" for a in aliasing) + "}"


def _precision(config: PrecisionConfig | None, out: list[str]) -> None:
    if config is None:
        return
    if any(config.operand_precision):
        out.append("operand_precision={" + ",".join(
            PRECISION_NAMES.get(p, str(p)) for p in config.operand_precision) + "}")
    if config.algorithm:
        out.append("algorithm=" + ALGORITHM_NAMES.get(config.algorithm, str(config.algorithm)))


# ---- per-opcode attribute printers ----------------------------------------------------------
Printer = Callable[[Instruction, list], None]
ATTR_PRINTERS: Registry[O, Printer] = Registry("attribute printer")
# The called-computation attributes; key None: every opcode without a printer of its own.
CALLED_PRINTERS: Registry[O | None, Printer] = Registry("called-computation printer")
prints = ATTR_PRINTERS.register


@prints(O.BROADCAST, O.TRANSPOSE, O.REDUCE, O.REVERSE, O.CONCATENATE, O.MAP,
        O.GET_DIMENSION_SIZE, O.SET_DIMENSION_SIZE)
def _dimensions(i: Instruction, out: list) -> None:
    out.append("dimensions=" + ints(i.attrs.dimensions or ()))


@prints(O.SORT)
def _sort(i: Instruction, out: list) -> None:
    _dimensions(i, out)
    if i.attrs.is_stable:
        out.append("is_stable=true")


@prints(O.IOTA)
def _iota(i: Instruction, out: list) -> None:
    out.append(f"iota_dimension={(i.attrs.dimensions or (0,))[0]}")


@prints(O.RESHAPE)
def _reshape(i: Instruction, out: list) -> None:
    if i.attrs.dimensions:
        out.append(f"inferred_dimension={i.attrs.dimensions[0]}")


@prints(O.GET_TUPLE_ELEMENT)
def _gte(i: Instruction, out: list) -> None:
    out.append(f"index={i.attrs.tuple_index}")


@prints(O.COMPARE)
def _compare(i: Instruction, out: list) -> None:
    a = i.attrs
    out.append(f"direction={a.comparison_direction}")
    operand_type = i.operands[0].shape.element_type if i.operands else None
    default = default_comparison_type(operand_type) if operand_type is not None else None
    if a.comparison_type and a.comparison_type != default:
        out.append(f"type={a.comparison_type}")


@prints(O.SLICE)
def _slice(i: Instruction, out: list) -> None:
    dims = i.attrs.slice or ()
    strided = any(d.stride != 1 for d in dims)
    out.append("slice={" + ", ".join(
        f"[{d.start}:{d.limit}" + (f":{d.stride}]" if strided else "]") for d in dims) + "}")


@prints(O.DYNAMIC_SLICE)
def _dynamic_slice(i: Instruction, out: list) -> None:
    out.append("dynamic_slice_sizes=" + ints(i.attrs.dynamic_slice_sizes or ()))


@prints(O.PAD)
def _pad(i: Instruction, out: list) -> None:
    out.append("padding=" + format_padding(i.attrs.padding or ()))


def _window(i: Instruction, out: list) -> None:
    if i.attrs.window is not None and i.attrs.window.dims:
        out.append("window={" + format_window(i.attrs.window) + "}")


prints(O.REDUCE_WINDOW, O.SELECT_AND_SCATTER)(_window)


def _group_counts(i: Instruction, out: list) -> None:
    a = i.attrs
    if a.feature_group_count not in (None, 1):
        out.append(f"feature_group_count={a.feature_group_count}")
    if a.batch_group_count not in (None, 1):
        out.append(f"batch_group_count={a.batch_group_count}")


@prints(O.CONVOLUTION)
def _convolution(i: Instruction, out: list) -> None:
    _window(i, out)
    if i.attrs.conv_dnums is not None:
        out.append("dim_labels=" + format_dim_labels(i.attrs.conv_dnums))
    _group_counts(i, out)
    _precision(i.attrs.precision_config, out)


def format_dot_dims(d: DotDimensionNumbers) -> str:
    parts = []
    if d.lhs_batch_dimensions:
        parts.append("lhs_batch_dims=" + ints(d.lhs_batch_dimensions))
    parts.append("lhs_contracting_dims=" + ints(d.lhs_contracting_dimensions))
    if d.rhs_batch_dimensions:
        parts.append("rhs_batch_dims=" + ints(d.rhs_batch_dimensions))
    parts.append("rhs_contracting_dims=" + ints(d.rhs_contracting_dimensions))
    return ", ".join(parts)


@prints(O.DOT, O.RAGGED_DOT)
def _dot(i: Instruction, out: list) -> None:
    out.append(format_dot_dims(i.attrs.dot_dnums or DotDimensionNumbers()))
    _precision(i.attrs.precision_config, out)


def _dimension_numbers(fields: list[tuple[str, tuple, bool]], index_vector_dim: int) -> str:
    """`name={...}` for each (name, values, always) field, optional ones only when non-empty,
    then index_vector_dim: the shared shape of gather's and scatter's dimension numbers."""
    parts = [f"{name}={ints(values)}" for name, values, always in fields if always or values]
    parts.append(f"index_vector_dim={index_vector_dim}")
    return ", ".join(parts)


def format_gather_dims(d: GatherDimensionNumbers) -> str:
    return _dimension_numbers([
        ("offset_dims", d.offset_dims, True),
        ("collapsed_slice_dims", d.collapsed_slice_dims, True),
        ("start_index_map", d.start_index_map, True),
        ("operand_batching_dims", d.operand_batching_dims, False),
        ("start_indices_batching_dims", d.start_indices_batching_dims, False)],
        d.index_vector_dim)


@prints(O.GATHER)
def _gather(i: Instruction, out: list) -> None:
    out.append(format_gather_dims(i.attrs.gather_dnums or GatherDimensionNumbers()))
    out.append("slice_sizes=" + ints(i.attrs.gather_slice_sizes or ()))
    if i.attrs.indices_are_sorted:
        out.append("indices_are_sorted=true")


def format_scatter_dims(d: ScatterDimensionNumbers) -> str:
    return _dimension_numbers([
        ("update_window_dims", d.update_window_dims, True),
        ("inserted_window_dims", d.inserted_window_dims, True),
        ("scatter_dims_to_operand_dims", d.scatter_dims_to_operand_dims, True),
        ("input_batching_dims", d.input_batching_dims, False),
        ("scatter_indices_batching_dims", d.scatter_indices_batching_dims, False)],
        d.index_vector_dim)


@prints(O.SCATTER)
def _scatter(i: Instruction, out: list) -> None:
    out.append(format_scatter_dims(i.attrs.scatter_dnums or ScatterDimensionNumbers()))
    if i.attrs.indices_are_sorted:
        out.append("indices_are_sorted=true")
    if i.attrs.unique_indices:
        out.append("unique_indices=true")


@prints(O.CUSTOM_CALL)
def _custom_call(i: Instruction, out: list) -> None:
    a = i.attrs
    _window(i, out)
    if a.conv_dnums is not None:
        out.append("dim_labels=" + format_dim_labels(a.conv_dnums))
    _group_counts(i, out)
    _precision(a.precision_config, out)
    out.append(f'custom_call_target="{c_escape(a.custom_call_target or "")}"')
    if a.operand_layout_constraints is not None:
        out.append("operand_layout_constraints={" + ", ".join(
            shape_text(s) for s in a.operand_layout_constraints) + "}")
    if a.custom_call_has_side_effect:
        out.append("custom_call_has_side_effect=true")
    if a.literal is not None:
        out.append(f"literal={shape_text(a.literal.shape)} {format_literal(a.literal)}")
    if a.output_operand_aliasing:
        out.append("output_to_operand_aliasing=" + format_aliasing(a.output_operand_aliasing))
    if a.custom_call_api_version not in (None, 0, 1):
        name = API_VERSION_NAMES.get(a.custom_call_api_version, str(a.custom_call_api_version))
        out.append(f"api_version={name}")


@prints(O.FUSION)
def _fusion(i: Instruction, out: list) -> None:
    out.append(f"kind={i.attrs.fusion_kind or 'kLoop'}")
    if i.attrs.output_operand_aliasing:
        out.append("output_to_operand_aliasing=" + format_aliasing(i.attrs.output_operand_aliasing))


@prints(O.FFT)
def _fft(i: Instruction, out: list) -> None:
    out.append(f"fft_type={FFT_NAMES.get(i.attrs.fft_type or 0, i.attrs.fft_type)}")
    out.append("fft_length=" + ints(i.attrs.fft_length or ()))


@prints(O.RNG)
def _rng(i: Instruction, out: list) -> None:
    out.append(f"distribution={DISTRIBUTION_NAMES.get(i.attrs.distribution, i.attrs.distribution)}")


@prints(O.RNG_BIT_GENERATOR)
def _rng_bits(i: Instruction, out: list) -> None:
    algo = i.attrs.rng_algorithm or 0
    out.append(f"algorithm={RNG_ALGORITHM_NAMES.get(algo, algo)}")


@prints(O.RNG_GET_AND_UPDATE_STATE)
def _rng_state(i: Instruction, out: list) -> None:
    out.append(f"delta={i.attrs.delta or 0}")


@prints(O.REDUCE_PRECISION)
def _reduce_precision(i: Instruction, out: list) -> None:
    out.append(f"exponent_bits={i.attrs.exponent_bits}")
    out.append(f"mantissa_bits={i.attrs.mantissa_bits}")


@prints(O.BATCH_NORM_TRAINING, O.BATCH_NORM_INFERENCE, O.BATCH_NORM_GRAD)
def _batch_norm(i: Instruction, out: list) -> None:
    out.append("epsilon=" + format_scalar(i.attrs.epsilon or 0.0, PrimitiveType.F32))
    out.append(f"feature_index={i.attrs.feature_index or 0}")


@prints(O.TRIANGULAR_SOLVE)
def _triangular_solve(i: Instruction, out: list) -> None:
    o = i.attrs.triangular_solve_options
    if o is None:
        return
    for key in ("left_side", "lower", "unit_diagonal"):
        if getattr(o, key):
            out.append(f"{key}=true")
    if o.transpose_a:
        out.append(f"transpose_a={TRANSPOSE_NAMES.get(o.transpose_a, o.transpose_a)}")


@prints(O.CHOLESKY)
def _cholesky(i: Instruction, out: list) -> None:
    if i.attrs.cholesky_options is not None and i.attrs.cholesky_options.lower:
        out.append("lower=true")


@prints(O.TOPK)
def _topk(i: Instruction, out: list) -> None:
    out.append(f"k={i.attrs.k}")
    out.append(f"largest={'false' if i.attrs.largest is False else 'true'}")


def _channel(i: Instruction, out: list) -> None:
    if i.attrs.channel_id:
        out.append(f"channel_id={i.attrs.channel_id}")


def _collective(i: Instruction, out: list) -> None:
    _channel(i, out)
    groups = i.attrs.replica_groups or ()
    form = i.attrs.replica_group_list
    if form is not None and form.groups() == groups:  # a pass may have rewritten the groups
        out.append("replica_groups=" + form.text())
        return
    out.append("replica_groups={" + ",".join(ints(g) for g in groups) + "}")


@prints(O.ALL_REDUCE, O.ALL_REDUCE_START, O.REDUCE_SCATTER, O.ALL_GATHER, O.ALL_GATHER_START)
def _all_reduce_like(i: Instruction, out: list) -> None:
    _collective(i, out)
    gather = i.opcode in (O.ALL_GATHER, O.ALL_GATHER_START)
    if gather:
        _dimensions(i, out)
    if i.attrs.use_global_device_ids:
        out.append("use_global_device_ids=true")
    if i.opcode == O.REDUCE_SCATTER:
        _dimensions(i, out)


@prints(O.ALL_TO_ALL, O.RAGGED_ALL_TO_ALL, O.COLLECTIVE_BROADCAST)
def _all_to_all(i: Instruction, out: list) -> None:
    _collective(i, out)
    if i.attrs.dimensions:
        _dimensions(i, out)


@prints(O.COLLECTIVE_PERMUTE, O.COLLECTIVE_PERMUTE_START)
def _permute(i: Instruction, out: list) -> None:
    _channel(i, out)
    pairs = i.attrs.source_target_pairs or ()
    out.append("source_target_pairs={" + ",".join(f"{{{s},{t}}}" for s, t in pairs) + "}")


prints(O.SEND, O.SEND_DONE, O.RECV, O.RECV_DONE)(_channel)


# ---- called computations --------------------------------------------------------------------
def _names(comps) -> str:
    return ", ".join(f"%{c.name}" for c in comps)


called = CALLED_PRINTERS.register


@called(O.WHILE)
def _while(i: Instruction, out: list) -> None:
    if len(i.called) == 2:
        out.append(f"condition=%{i.while_condition.name}")
        out.append(f"body=%{i.while_body.name}")


@called(O.SELECT_AND_SCATTER)
def _select_scatter(i: Instruction, out: list) -> None:
    if len(i.called) == 2:
        out.append(f"select=%{i.called[0].name}")
        out.append(f"scatter=%{i.called[1].name}")


@called(O.CONDITIONAL)
def _conditional(i: Instruction, out: list) -> None:
    pred = bool(i.operands) and i.operands[0].shape.element_type == PrimitiveType.PRED
    if pred and len(i.called) == 2:
        out.append(f"true_computation=%{i.called[0].name}")
        out.append(f"false_computation=%{i.called[1].name}")
    elif i.called:
        out.append("branch_computations={" + _names(i.called) + "}")


@called(O.CALL, O.MAP, O.REDUCE_WINDOW, O.REDUCE, O.ALL_REDUCE, O.REDUCE_SCATTER,
        O.ALL_REDUCE_START, O.SCATTER, O.SORT)
def _to_apply(i: Instruction, out: list) -> None:
    if i.called:
        out.append(f"to_apply={_names(i.called)}")


@called(O.CUSTOM_CALL)
def _custom_called(i: Instruction, out: list) -> None:
    if i.called:
        out.append("called_computations={" + _names(i.called) + "}")


@called(O.ASYNC_UPDATE, O.ASYNC_DONE)
def _async_tail(i: Instruction, out: list) -> None:
    return None


@called(None)
def _calls(i: Instruction, out: list) -> None:
    if i.called:
        out.append(f"calls={_names(i.called)}")
