"""Converters between xla_data sub-messages and the IR's attribute dataclasses."""

from __future__ import annotations

from hloc.ir.attrs import (
    CholeskyOptions,
    ConvDimensionNumbers,
    DotDimensionNumbers,
    GatherDimensionNumbers,
    OpMetadata,
    OutputOperandAliasing,
    PaddingDim,
    PrecisionConfig,
    ScatterDimensionNumbers,
    SliceDim,
    TriangularSolveOptions,
    Window,
    WindowDimension,
)

from .gen import xla_data_pb2
from .shape_proto import MalformedProto


def check_enum(value: int, enum_wrapper, what: str) -> int:
    """`value` if the proto enum defines it; protobuf keeps unknown enum numbers, we do not."""
    if value not in enum_wrapper.values():
        raise MalformedProto(f"invalid {what} {value}")
    return value


# ---- window ---------------------------------------------------------------------------------
def window_from_proto(pb) -> Window:
    return Window(
        tuple(
            WindowDimension(
                d.size,
                d.stride,
                d.padding_low,
                d.padding_high,
                d.window_dilation,
                d.base_dilation,
                d.window_reversal,
            )
            for d in pb.dimensions
        )
    )


def window_to_proto(window: Window, out) -> None:
    out.SetInParent()
    for d in window.dims:
        out.dimensions.add(
            size=d.size,
            stride=d.stride,
            padding_low=d.padding_low,
            padding_high=d.padding_high,
            window_dilation=d.window_dilation,
            base_dilation=d.base_dilation,
            window_reversal=d.window_reversal,
        )


# ---- dimension-number records: the IR field names equal the proto field names -----------------
def _record_from_proto(cls, pb):
    values = {}
    for name in cls.__dataclass_fields__:
        value = getattr(pb, name)
        values[name] = value if isinstance(value, int) else tuple(value)
    return cls(**values)


def _record_to_proto(record, out) -> None:
    out.SetInParent()
    for name in record.__dataclass_fields__:
        value = getattr(record, name)
        if isinstance(value, tuple):
            getattr(out, name).extend(value)
        else:
            setattr(out, name, value)


def conv_dnums_from_proto(pb) -> ConvDimensionNumbers:
    return _record_from_proto(ConvDimensionNumbers, pb)


def dot_dnums_from_proto(pb) -> DotDimensionNumbers:
    return _record_from_proto(DotDimensionNumbers, pb)


def gather_dnums_from_proto(pb) -> GatherDimensionNumbers:
    return _record_from_proto(GatherDimensionNumbers, pb)


def scatter_dnums_from_proto(pb) -> ScatterDimensionNumbers:
    return _record_from_proto(ScatterDimensionNumbers, pb)


record_to_proto = _record_to_proto


# ---- padding / slice ------------------------------------------------------------------------
def padding_from_proto(pb) -> tuple[PaddingDim, ...]:
    return tuple(
        PaddingDim(d.edge_padding_low, d.edge_padding_high, d.interior_padding)
        for d in pb.dimensions
    )


def padding_to_proto(padding: tuple[PaddingDim, ...], out) -> None:
    out.SetInParent()
    for d in padding:
        out.dimensions.add(
            edge_padding_low=d.low, edge_padding_high=d.high, interior_padding=d.interior
        )


def slice_from_proto(repeated) -> tuple[SliceDim, ...]:
    return tuple(SliceDim(s.start, s.limit, s.stride) for s in repeated)


def slice_to_proto(dims: tuple[SliceDim, ...], repeated) -> None:
    for d in dims:
        repeated.add(start=d.start, limit=d.limit, stride=d.stride)


# ---- precision, aliasing, options -----------------------------------------------------------
def precision_from_proto(pb) -> PrecisionConfig:
    for p in pb.operand_precision:
        check_enum(p, xla_data_pb2.PrecisionConfig.Precision, "operand precision")
    check_enum(pb.algorithm, xla_data_pb2.PrecisionConfig.Algorithm, "dot algorithm")
    return PrecisionConfig(tuple(pb.operand_precision), pb.algorithm)


def precision_to_proto(config: PrecisionConfig, out) -> None:
    out.SetInParent()
    out.operand_precision.extend(config.operand_precision)
    out.algorithm = config.algorithm


def aliasing_from_proto(repeated) -> tuple[OutputOperandAliasing, ...]:
    return tuple(
        OutputOperandAliasing(
            tuple(a.output_shape_index), a.operand_index, tuple(a.operand_shape_index)
        )
        for a in repeated
    )


def aliasing_to_proto(aliasing: tuple[OutputOperandAliasing, ...], repeated) -> None:
    for a in aliasing:
        repeated.add(
            output_shape_index=a.output_shape_index,
            operand_index=a.operand_index,
            operand_shape_index=a.operand_shape_index,
        )


def triangular_from_proto(pb) -> TriangularSolveOptions:
    check_enum(pb.transpose_a, xla_data_pb2.TriangularSolveOptions.Transpose, "transpose_a")
    return TriangularSolveOptions(pb.left_side, pb.lower, pb.unit_diagonal, pb.transpose_a)


def triangular_to_proto(options: TriangularSolveOptions, out) -> None:
    out.SetInParent()
    out.left_side, out.lower = options.left_side, options.lower
    out.unit_diagonal, out.transpose_a = options.unit_diagonal, options.transpose_a


def cholesky_from_proto(pb) -> CholeskyOptions:
    return CholeskyOptions(pb.lower)


def cholesky_to_proto(options: CholeskyOptions, out) -> None:
    out.SetInParent()
    out.lower = options.lower


# ---- metadata -------------------------------------------------------------------------------
_METADATA_FIELDS = tuple(OpMetadata.__dataclass_fields__)


def metadata_from_proto(pb) -> OpMetadata:
    return OpMetadata(**{name: getattr(pb, name) for name in _METADATA_FIELDS})


def metadata_to_proto(metadata: OpMetadata, out) -> None:
    out.SetInParent()  # XLA always writes metadata, empty or not
    for name in _METADATA_FIELDS:
        setattr(out, name, getattr(metadata, name))
