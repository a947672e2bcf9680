"""Typed, immutable instruction attributes (the structured fields of HloInstructionProto)."""

from __future__ import annotations

from dataclasses import field, replace

from ..util.record import dataclass
from .literal import Literal
from .replica_groups import ReplicaGroupList
from .shape import Shape


@dataclass(frozen=True)
class WindowDimension:
    size: int
    stride: int = 1
    padding_low: int = 0
    padding_high: int = 0
    window_dilation: int = 1
    base_dilation: int = 1
    window_reversal: bool = False

    @property
    def trivial(self) -> bool:
        """One tap, no stride, padding or dilation: the output along it is the operand."""
        return (self.size == 1 and self.stride == 1 and self.padding_low == 0
                and self.padding_high == 0 and self.window_dilation == 1
                and self.base_dilation == 1)


@dataclass(frozen=True)
class Window:
    dims: tuple[WindowDimension, ...]


@dataclass(frozen=True)
class ConvDimensionNumbers:
    input_batch_dimension: int
    input_feature_dimension: int
    input_spatial_dimensions: tuple[int, ...]
    kernel_input_feature_dimension: int
    kernel_output_feature_dimension: int
    kernel_spatial_dimensions: tuple[int, ...]
    output_batch_dimension: int
    output_feature_dimension: int
    output_spatial_dimensions: tuple[int, ...]


@dataclass(frozen=True)
class DotDimensionNumbers:
    lhs_contracting_dimensions: tuple[int, ...] = ()
    rhs_contracting_dimensions: tuple[int, ...] = ()
    lhs_batch_dimensions: tuple[int, ...] = ()
    rhs_batch_dimensions: tuple[int, ...] = ()


@dataclass(frozen=True)
class GatherDimensionNumbers:
    offset_dims: tuple[int, ...] = ()
    collapsed_slice_dims: tuple[int, ...] = ()
    start_index_map: tuple[int, ...] = ()
    index_vector_dim: int = 0
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScatterDimensionNumbers:
    update_window_dims: tuple[int, ...] = ()
    inserted_window_dims: tuple[int, ...] = ()
    scatter_dims_to_operand_dims: tuple[int, ...] = ()
    index_vector_dim: int = 0
    input_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class PaddingDim:
    low: int = 0
    high: int = 0
    interior: int = 0


@dataclass(frozen=True)
class SliceDim:
    start: int
    limit: int
    stride: int = 1


@dataclass(frozen=True)
class OpMetadata:
    op_type: str = ""
    op_name: str = ""
    source_file: str = ""
    source_line: int = 0
    source_end_line: int = 0
    source_column: int = 0
    source_end_column: int = 0
    stack_frame_id: int = 0
    scheduling_name: str = ""
    deduplicated_name: str = ""

    def is_empty(self) -> bool:
        return self == OpMetadata()


@dataclass(frozen=True)
class PrecisionConfig:
    # Values of PrecisionConfig.Precision: DEFAULT=0, HIGH=1, HIGHEST=2.
    operand_precision: tuple[int, ...] = ()
    algorithm: int = 0


@dataclass(frozen=True)
class OutputOperandAliasing:
    output_shape_index: tuple[int, ...]
    operand_index: int
    operand_shape_index: tuple[int, ...]


@dataclass(frozen=True)
class TriangularSolveOptions:
    left_side: bool = False
    lower: bool = False
    unit_diagonal: bool = False
    transpose_a: int = 0  # 0 invalid, 1 NO_TRANSPOSE, 2 TRANSPOSE, 3 ADJOINT


@dataclass(frozen=True)
class CholeskyOptions:
    lower: bool = False


@dataclass(frozen=True)
class Attrs:
    """Every opcode-specific field an instruction may carry; unset fields are None.

    One frozen record for all opcodes keeps attributes typed and comparable (CSE and the text
    printer compare/print them field by field) while staying a 1:1 image of the proto.
    """

    parameter_number: int | None = None
    literal: Literal | None = None
    tuple_index: int | None = None
    dimensions: tuple[int, ...] | None = None
    window: Window | None = None
    conv_dnums: ConvDimensionNumbers | None = None
    slice: tuple[SliceDim, ...] | None = None
    exponent_bits: int | None = None
    mantissa_bits: int | None = None
    dynamic_slice_sizes: tuple[int, ...] | None = None
    padding: tuple[PaddingDim, ...] | None = None
    distribution: int | None = None  # RandomDistribution
    epsilon: float | None = None
    feature_index: int | None = None
    channel_id: int | None = None
    custom_call_target: str | None = None
    custom_call_api_version: int | None = None
    custom_call_has_side_effect: bool | None = None
    # custom-call `operand_layout_constraints={...}` (proto: constrain_layout + operand_shapes_with_layout)
    operand_layout_constraints: tuple[Shape, ...] | None = None
    backend_config: str | None = None
    dot_dnums: DotDimensionNumbers | None = None
    fft_type: int | None = None  # FftType
    fft_length: tuple[int, ...] | None = None
    gather_dnums: GatherDimensionNumbers | None = None
    gather_slice_sizes: tuple[int, ...] | None = None
    scatter_dnums: ScatterDimensionNumbers | None = None
    feature_group_count: int | None = None
    batch_group_count: int | None = None
    precision_config: PrecisionConfig | None = None
    is_stable: bool | None = None
    comparison_direction: str | None = None  # EQ NE LT LE GT GE
    comparison_type: str | None = None  # FLOAT TOTALORDER SIGNED UNSIGNED
    indices_are_sorted: bool | None = None
    unique_indices: bool | None = None
    rng_algorithm: int | None = None  # RandomAlgorithm
    fusion_kind: str | None = None  # kLoop kInput kOutput kCustom
    k: int | None = None
    largest: bool | None = None
    output_operand_aliasing: tuple[OutputOperandAliasing, ...] | None = None
    triangular_solve_options: TriangularSolveOptions | None = None
    cholesky_options: CholeskyOptions | None = None
    replica_groups: tuple[tuple[int, ...], ...] | None = None
    # The iota / mesh-axes encoding replica_groups came in, kept so it prints back the same.
    replica_group_list: ReplicaGroupList | None = None
    source_target_pairs: tuple[tuple[int, int], ...] | None = None
    use_global_device_ids: bool | None = None
    delta: int | None = None
    sharding: str | None = None  # HLO text form, e.g. "{replicated}"
    frontend_attributes: tuple[tuple[str, str], ...] = field(default=())

    def with_(self, **changes) -> Attrs:
        return replace(self, **changes)


NO_ATTRS = Attrs()
