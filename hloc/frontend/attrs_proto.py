"""HloInstructionProto attribute fields <-> hloc.ir.Attrs, as one table of field codecs.

proto3 scalars have no presence, so a 0/false/empty field is indistinguishable from an unset
one. The rule: a field becomes an attribute when it is set (non-default), or always for the
opcodes that give it meaning (e.g. tuple_index of get-tuple-element, where 0 is a real
value). Booleans are only ever set when true, as HLO text spells them. Message fields use
their presence bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hloc.errors import UnsupportedError
from hloc.ir.attrs import Attrs
from hloc.ir.opcodes import Opcode

from ..util.record import dataclass
from . import attr_messages as am
from .gen import hlo_pb2, xla_data_pb2
from .literal_proto import literal_from_proto, literal_to_proto
from .replica_groups_proto import group_list_from_proto, group_list_to_proto
from .shape_proto import (
    MalformedProto,
    UnsupportedProto,
    quote,
    shape_from_proto,
    shape_to_proto,
)
from .sharding import sharding_from_text, sharding_to_text

Op = Opcode
# Opcodes whose `dimensions` is meaningful even when empty (e.g. broadcast of a scalar).
DIMENSION_OPCODES = frozenset(
    {
        Op.BROADCAST,
        Op.TRANSPOSE,
        Op.REDUCE,
        Op.REVERSE,
        Op.CONCATENATE,
        Op.SORT,
        Op.IOTA,
        Op.MAP,
        Op.ALL_GATHER,
        Op.ALL_GATHER_START,
        Op.ALL_TO_ALL,
        Op.REDUCE_SCATTER,
        Op.GET_DIMENSION_SIZE,
        Op.SET_DIMENSION_SIZE,
    }
)
_BATCH_NORM = frozenset({Op.BATCH_NORM_GRAD, Op.BATCH_NORM_INFERENCE, Op.BATCH_NORM_TRAINING})
COMPARISON_DIRECTIONS = frozenset({"EQ", "NE", "LT", "LE", "GT", "GE"})
COMPARISON_TYPES = frozenset({"FLOAT", "TOTALORDER", "SIGNED", "UNSIGNED"})
FUSION_KINDS = frozenset({"kLoop", "kInput", "kOutput", "kCustom"})
_PB = hlo_pb2.HloInstructionProto


@dataclass(frozen=True)
class FieldCodec:
    """How one Attrs field is read from and written to an HloInstructionProto."""

    attr: str
    load: Callable[[Any, Opcode], Any]  # (instruction proto, opcode) -> value or None
    store: Callable[[Any, Any], None]  # (value, instruction proto) -> None
    # The proto field read; when known, `load` is skipped unless the field is present or the
    # opcode gives its default a meaning (None: always call `load`). Keeps import linear and fast.
    field: str | None = None
    ops: frozenset = frozenset()


def _scalar(attr: str, field: str, ops=frozenset(), check=None) -> FieldCodec:
    def load(pb, opcode):
        value = getattr(pb, field)
        if not value and opcode not in ops:
            return None
        return check(value) if check else value

    return FieldCodec(attr, load, lambda v, pb: setattr(pb, field, v), field, frozenset(ops))


def _ints(attr: str, field: str, ops=frozenset()) -> FieldCodec:
    def load(pb, opcode):
        value = tuple(getattr(pb, field))
        return value if value or opcode in ops else None

    return FieldCodec(attr, load, lambda v, pb: getattr(pb, field).extend(v), field, frozenset(ops))


def _message(attr: str, field: str, decode, encode) -> FieldCodec:
    def load(pb, opcode):
        return decode(getattr(pb, field)) if pb.HasField(field) else None

    return FieldCodec(attr, load, lambda v, pb: encode(v, getattr(pb, field)), field)


def _repeated(attr: str, field: str, decode, encode) -> FieldCodec:
    def load(pb, opcode):
        return decode(getattr(pb, field)) if len(getattr(pb, field)) else None

    return FieldCodec(attr, load, lambda v, pb: encode(v, getattr(pb, field)), field)


def _enum(wrapper, what: str):
    return lambda value: am.check_enum(value, wrapper, what)


def _one_of(allowed: frozenset, what: str):
    def check(value: str) -> str:
        if value not in allowed:
            raise MalformedProto(f"invalid {what} {quote(value)}")
        return value

    return check


# ---- fields needing more than a plain copy ----------------------------------------------------
def _load_backend_config(pb, opcode):
    # Often JSON, sometimes a serialized proto: surrogateescape keeps arbitrary bytes exact.
    return pb.backend_config.decode("utf-8", "surrogateescape") if pb.backend_config else None


def _store_backend_config(value: str, pb) -> None:
    pb.backend_config = value.encode("utf-8", "surrogateescape")


def _load_layout_constraints(pb, opcode):
    if not pb.constrain_layout:
        return None
    return tuple(shape_from_proto(s) for s in pb.operand_shapes_with_layout)


def _store_layout_constraints(shapes, pb) -> None:
    pb.constrain_layout = True
    for shape in shapes:
        shape_to_proto(shape, pb.operand_shapes_with_layout.add())


def _load_group_count(field: str):
    def load(pb, opcode):
        value = getattr(pb, field)
        if opcode == Op.CONVOLUTION:
            return max(value, 1)  # XLA reads an unset count as 1
        return value or None

    return load


def _load_replica_groups(pb, opcode):
    which = pb.WhichOneof("replica_group_list")
    if which == "collective_device_list":
        groups = pb.collective_device_list.replica_groups
    elif which is None:
        groups = pb.replica_groups
    else:
        return group_list_from_proto(pb).groups()
    return tuple(tuple(g.replica_ids) for g in groups) if len(groups) else None


def _store_replica_groups(groups, pb) -> None:
    device_list = pb.collective_device_list
    device_list.SetInParent()
    for g in groups:
        device_list.replica_groups.add().replica_ids.extend(g)


def _load_sharding(pb, opcode):
    return sharding_to_text(pb.sharding) if pb.HasField("sharding") else None


def _store_sharding(text: str, pb) -> None:
    pb.sharding.SetInParent()  # a replicated sharding is an all-default message
    try:
        sharding_from_text(text, pb.sharding)
    except ValueError as e:
        raise UnsupportedError(f"instruction {pb.name}: {e}") from None


def _load_frontend_attributes(pb, opcode):
    return tuple(sorted(pb.frontend_attributes.map.items()))


def _store_frontend_attributes(items, pb) -> None:
    pb.frontend_attributes.SetInParent()  # XLA always writes the (possibly empty) map
    pb.frontend_attributes.map.update(dict(items))


def _load_compare_direction(pb, opcode):
    value = pb.comparison_direction
    if not value and opcode != Op.COMPARE:
        return None
    return _one_of(COMPARISON_DIRECTIONS, "comparison direction")(value)


def _source_target_store(pairs, repeated) -> None:
    for s, t in pairs:
        repeated.add(source=s, target=t)


CODECS: tuple[FieldCodec, ...] = (
    _scalar("parameter_number", "parameter_number", {Op.PARAMETER}),
    _message("literal", "literal", literal_from_proto, literal_to_proto),
    _scalar("tuple_index", "tuple_index", {Op.GET_TUPLE_ELEMENT}),
    _ints("dimensions", "dimensions", DIMENSION_OPCODES),
    _message("window", "window", am.window_from_proto, am.window_to_proto),
    _message(
        "conv_dnums", "convolution_dimension_numbers", am.conv_dnums_from_proto, am.record_to_proto
    ),
    FieldCodec(
        "slice",
        lambda pb, op: (
            am.slice_from_proto(pb.slice_dimensions)
            if len(pb.slice_dimensions) or op == Op.SLICE
            else None
        ),
        lambda v, pb: am.slice_to_proto(v, pb.slice_dimensions),
    ),
    _scalar("exponent_bits", "exponent_bits", {Op.REDUCE_PRECISION}),
    _scalar("mantissa_bits", "mantissa_bits", {Op.REDUCE_PRECISION}),
    _ints("dynamic_slice_sizes", "dynamic_slice_sizes", {Op.DYNAMIC_SLICE}),
    _message("padding", "padding_config", am.padding_from_proto, am.padding_to_proto),
    _scalar(
        "distribution",
        "distribution",
        {Op.RNG},
        _enum(xla_data_pb2.RandomDistribution, "random distribution"),
    ),
    _scalar("epsilon", "epsilon", _BATCH_NORM),
    _scalar("feature_index", "feature_index", _BATCH_NORM),
    _scalar("channel_id", "channel_id"),
    _scalar("custom_call_target", "custom_call_target", {Op.CUSTOM_CALL}),
    _scalar(
        "custom_call_api_version",
        "custom_call_api_version",
        {Op.CUSTOM_CALL},
        _enum(hlo_pb2.CustomCallApiVersion, "custom-call API version"),
    ),
    _scalar("custom_call_has_side_effect", "custom_call_has_side_effect"),
    FieldCodec("operand_layout_constraints", _load_layout_constraints, _store_layout_constraints),
    FieldCodec("backend_config", _load_backend_config, _store_backend_config),
    _message("dot_dnums", "dot_dimension_numbers", am.dot_dnums_from_proto, am.record_to_proto),
    _scalar("fft_type", "fft_type", {Op.FFT}, _enum(xla_data_pb2.FftType, "FFT type")),
    _ints("fft_length", "fft_length", {Op.FFT}),
    _message(
        "gather_dnums", "gather_dimension_numbers", am.gather_dnums_from_proto, am.record_to_proto
    ),
    _ints("gather_slice_sizes", "gather_slice_sizes", {Op.GATHER}),
    _message(
        "scatter_dnums",
        "scatter_dimension_numbers",
        am.scatter_dnums_from_proto,
        am.record_to_proto,
    ),
    FieldCodec(
        "feature_group_count",
        _load_group_count("feature_group_count"),
        lambda v, pb: setattr(pb, "feature_group_count", v),
    ),
    FieldCodec(
        "batch_group_count",
        _load_group_count("batch_group_count"),
        lambda v, pb: setattr(pb, "batch_group_count", v),
    ),
    _message(
        "precision_config", "precision_config", am.precision_from_proto, am.precision_to_proto
    ),
    _scalar("is_stable", "is_stable"),
    FieldCodec(
        "comparison_direction",
        _load_compare_direction,
        lambda v, pb: setattr(pb, "comparison_direction", v),
    ),
    _scalar(
        "comparison_type", "comparison_type", check=_one_of(COMPARISON_TYPES, "comparison type")
    ),
    _scalar("indices_are_sorted", "indices_are_sorted"),
    _scalar("unique_indices", "unique_indices"),
    _scalar(
        "rng_algorithm",
        "rng_algorithm",
        {Op.RNG_BIT_GENERATOR},
        _enum(xla_data_pb2.RandomAlgorithm, "RNG algorithm"),
    ),
    _scalar("fusion_kind", "fusion_kind", {Op.FUSION}, _one_of(FUSION_KINDS, "fusion kind")),
    _scalar("k", "k", {Op.TOPK}),
    _scalar("largest", "largest", {Op.TOPK}),  # proto3: an absent field is XLA's false
    _repeated(
        "output_operand_aliasing",
        "output_operand_aliasing",
        am.aliasing_from_proto,
        am.aliasing_to_proto,
    ),
    _message(
        "triangular_solve_options",
        "triangular_solve_options",
        am.triangular_from_proto,
        am.triangular_to_proto,
    ),
    _message("cholesky_options", "cholesky_options", am.cholesky_from_proto, am.cholesky_to_proto),
    FieldCodec("replica_groups", _load_replica_groups, _store_replica_groups),
    # After replica_groups: the oneof keeps the compact encoding when there is one.
    FieldCodec("replica_group_list", lambda pb, op: group_list_from_proto(pb), group_list_to_proto),
    _repeated(
        "source_target_pairs",
        "source_target_pairs",
        lambda r: tuple((p.source, p.target) for p in r),
        _source_target_store,
    ),
    _scalar("use_global_device_ids", "use_global_device_ids"),
    _scalar("delta", "delta", {Op.RNG_GET_AND_UPDATE_STATE}),
    FieldCodec("sharding", _load_sharding, _store_sharding),
    FieldCodec("frontend_attributes", _load_frontend_attributes, _store_frontend_attributes),
)

# Fields the IR cannot express; silently dropping them would change what the program means.
_UNSUPPORTED_FIELDS = ("ragged_dot_dimension_numbers", "sparsity_config")


_ALWAYS: dict[Opcode, frozenset[str]] = {}


def _always_loaded(opcode: Opcode) -> frozenset[str]:
    """Attrs whose codec must run for this opcode even when its proto field is absent."""
    found = _ALWAYS.get(opcode)
    if found is None:
        found = frozenset(c.attr for c in CODECS if opcode in c.ops)
        _ALWAYS[opcode] = found
    return found


def attrs_from_proto(pb: _PB, opcode: Opcode) -> Attrs:
    """The Attrs of one instruction proto (MalformedProto / UnsupportedProto on bad fields)."""
    for field in _UNSUPPORTED_FIELDS:
        if pb.HasField(field) and getattr(pb, field).ListFields():  # XLA writes empty ones
            raise UnsupportedProto(f"field {field} is not supported")
    present = {fd.name for fd, _ in pb.ListFields()}
    always = _always_loaded(opcode)
    values = {}
    for codec in CODECS:
        if codec.field is not None and codec.field not in present and codec.attr not in always:
            continue
        value = codec.load(pb, opcode)
        if value is not None:
            values[codec.attr] = value
    return Attrs(**values)


def attrs_to_proto(attrs: Attrs, pb: _PB) -> None:
    """Write every set attribute into an instruction proto."""
    for codec in CODECS:
        value = getattr(attrs, codec.attr)
        if value is not None:
            codec.store(value, pb)
