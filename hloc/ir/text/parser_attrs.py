"""Instruction attribute parsing for HLO text: one handler per attribute name (a registry).

Handlers read the value at the cursor and store it on the instruction record; `finalize`
turns the record's pieces into typed Attrs. Attributes XLA prints that carry no meaning for
hloc (listed in IGNORED) are read and dropped; known XLA attributes hloc cannot represent
(UNSUPPORTED) and unknown names are ParseErrors.
"""

from __future__ import annotations

from collections.abc import Callable

from ...registry import Registry
from ..attrs import (
    CholeskyOptions,
    DotDimensionNumbers,
    GatherDimensionNumbers,
    OpMetadata,
    PrecisionConfig,
    ScatterDimensionNumbers,
    TriangularSolveOptions,
)
from ..dtypes import PrimitiveType
from ..opcodes import Opcode as O
from ..shape import Shape
from .lexer import ATTR_NAME, Cursor
from .literal_parse import parse_literal
from .parser_values import (
    aliasing,
    choice,
    dim_labels,
    enum_value,
    frontend_attributes,
    int_list,
    int_list_list,
    metadata,
    name_list,
    name_ref,
    padding,
    parse_shape,
    replica_groups,
    shape_list,
    skip_value,
    slice_ranges,
    string_or_dict,
    window,
    word_list,
)
from .printer_attrs import (
    ALGORITHM_NAMES,
    API_VERSION_NAMES,
    COMPARISON_TYPES,
    DIRECTIONS,
    DISTRIBUTION_NAMES,
    FFT_NAMES,
    FUSION_KINDS,
    PRECISION_NAMES,
    RNG_ALGORITHM_NAMES,
    TRANSPOSE_NAMES,
)

# Read and dropped: debugging/visualisation data and scheduling or sharding-propagation hints
# that never change what a module computes.
IGNORED = frozenset({
    "origin", "statistics", "parameter_replication", "is_composite", "result_accuracy",
    "constrain_layout", "schedule", "padding_type", "mode", "cross_program_prefetch_index",
    "async_execution_thread",
})
UNSUPPORTED = frozenset({
    "is_host_transfer", "infeed_config", "outfeed_config", "outfeed_shape", "domain", "conv_kind",
    "lhs_ragged_dims", "rhs_group_dims", "sparsity", "is_reverse", "is_associative",
})


class InstrRec:
    """One parsed instruction before names are resolved into objects."""

    __slots__ = ("name", "pos", "root", "shape", "opcode", "operands", "fields", "parts",
                 "comps", "preds", "metadata", "seen")

    def __init__(self, name: str, pos: int, root: bool):
        self.name, self.pos, self.root = name, pos, root
        self.shape: Shape | None = None
        self.opcode: O | None = None
        self.operands: list[tuple[str, int, object]] = []  # (name, pos, inline shape or None)
        self.fields: dict = {}  # Attrs keyword arguments
        self.parts: dict = {}  # pieces of composite attributes (dot dims, precision, ...)
        self.comps: dict[str, list[tuple[str, int]]] = {}  # slot -> computation references
        self.preds: list[tuple[str, int]] = []
        self.metadata: OpMetadata | None = None
        self.seen: set[str] = set()


Handler = Callable[[Cursor, InstrRec, str], None]
# Attribute name -> the handler that reads its value into the record.
HANDLERS: Registry[str, Handler] = Registry("attribute parser")
handles = HANDLERS.register


def parse_attribute(cur: Cursor, rec: InstrRec) -> None:
    """`name=value` after a comma; dispatch on the name."""
    m = cur.expect(ATTR_NAME, "an attribute (name=value)")
    name, pos = m.group(1), m.start(1)
    if name in rec.seen:
        raise cur.error(f"attribute '{name}' appears twice", pos)
    rec.seen.add(name)
    handler = HANDLERS.get(name)
    if handler is not None:
        handler(cur, rec, name)
    elif name in IGNORED:
        skip_value(cur)
    elif name in UNSUPPORTED:
        raise cur.error(f"attribute '{name}' is not supported by hloc", pos)
    else:
        raise cur.error(f"unknown attribute '{name}'", pos)


# ---- handlers -----------------------------------------------------------------------------
def _field(name: str, reader):
    def handle(cur: Cursor, rec: InstrRec, attr: str) -> None:
        rec.fields[name] = reader(cur)
    return handle


def _part(reader):
    def handle(cur: Cursor, rec: InstrRec, attr: str) -> None:
        rec.parts[attr] = reader(cur)
    return handle


def _single(cur: Cursor) -> tuple[int, ...]:
    return (cur.expect_int(),)


for _name, _attr, _reader in [
    ("dimensions", "dimensions", int_list), ("index", "tuple_index", Cursor.expect_int),
    ("iota_dimension", "dimensions", _single), ("inferred_dimension", "dimensions", _single),
    ("window", "window", window), ("dim_labels", "conv_dnums", dim_labels),
    ("feature_group_count", "feature_group_count", Cursor.expect_int),
    ("batch_group_count", "batch_group_count", Cursor.expect_int),
    ("slice", "slice", slice_ranges), ("dynamic_slice_sizes", "dynamic_slice_sizes", int_list),
    ("padding", "padding", padding), ("exponent_bits", "exponent_bits", Cursor.expect_int),
    ("mantissa_bits", "mantissa_bits", Cursor.expect_int), ("k", "k", Cursor.expect_int),
    ("feature_index", "feature_index", Cursor.expect_int),
    ("channel_id", "channel_id", Cursor.expect_int), ("delta", "delta", Cursor.expect_int),
    ("fft_length", "fft_length", int_list), ("is_stable", "is_stable", Cursor.expect_bool),
    ("indices_are_sorted", "indices_are_sorted", Cursor.expect_bool),
    ("unique_indices", "unique_indices", Cursor.expect_bool),
    ("largest", "largest", Cursor.expect_bool),
    ("use_global_device_ids", "use_global_device_ids", Cursor.expect_bool),
    ("custom_call_has_side_effect", "custom_call_has_side_effect", Cursor.expect_bool),
    ("custom_call_target", "custom_call_target", Cursor.expect_string),
    ("backend_config", "backend_config", string_or_dict),
    ("operand_layout_constraints", "operand_layout_constraints", shape_list),
    ("output_to_operand_aliasing", "output_operand_aliasing", aliasing),
    ("source_target_pairs", "source_target_pairs", int_list_list),
    ("sharding", "sharding", Cursor.raw_braced),
    ("frontend_attributes", "frontend_attributes", frontend_attributes),
    ("direction", "comparison_direction", lambda c: choice(c, DIRECTIONS, "comparison direction")),
    ("type", "comparison_type", lambda c: choice(c, COMPARISON_TYPES, "comparison type")),
    ("kind", "fusion_kind", lambda c: choice(c, FUSION_KINDS, "fusion kind")),
    ("distribution", "distribution", lambda c: enum_value(c, DISTRIBUTION_NAMES, "distribution")),
    ("fft_type", "fft_type", lambda c: enum_value(c, FFT_NAMES, "fft type")),
    ("api_version", "custom_call_api_version",
     lambda c: enum_value(c, API_VERSION_NAMES, "custom-call API version")),
]:
    HANDLERS.add(_name, _field(_attr, _reader))

for _name, _reader in [
    ("lhs_batch_dims", int_list), ("lhs_contracting_dims", int_list),
    ("rhs_batch_dims", int_list), ("rhs_contracting_dims", int_list),
    ("offset_dims", int_list), ("collapsed_slice_dims", int_list), ("start_index_map", int_list),
    ("operand_batching_dims", int_list), ("start_indices_batching_dims", int_list),
    ("update_window_dims", int_list), ("inserted_window_dims", int_list),
    ("scatter_dims_to_operand_dims", int_list), ("input_batching_dims", int_list),
    ("scatter_indices_batching_dims", int_list), ("index_vector_dim", Cursor.expect_int),
    ("slice_sizes", int_list), ("left_side", Cursor.expect_bool), ("lower", Cursor.expect_bool),
    ("unit_diagonal", Cursor.expect_bool),
    ("transpose_a", lambda c: enum_value(c, TRANSPOSE_NAMES, "transpose_a value")),
]:
    HANDLERS.add(_name, _part(_reader))


@handles("replica_groups")
def _replica_groups(cur: Cursor, rec: InstrRec, attr: str) -> None:
    rec.fields["replica_groups"], form = replica_groups(cur)
    if form is not None:
        rec.fields["replica_group_list"] = form


@handles("operand_precision")
def _operand_precision(cur: Cursor, rec: InstrRec, attr: str) -> None:
    rec.parts[attr] = _precisions(cur)


def _precisions(cur: Cursor) -> list[int]:
    names = {v: k for k, v in PRECISION_NAMES.items()}
    out = []
    for word, pos in word_list(cur):
        if word not in names:
            raise cur.error(f"unknown precision '{word}' (expected default, high or highest)", pos)
        out.append(names[word])
    return out


@handles("algorithm")
def _algorithm(cur: Cursor, rec: InstrRec, attr: str) -> None:
    if rec.opcode == O.RNG_BIT_GENERATOR:
        rec.fields["rng_algorithm"] = enum_value(cur, RNG_ALGORITHM_NAMES, "rng algorithm")
    else:
        rec.parts["algorithm"] = enum_value(cur, ALGORITHM_NAMES, "dot algorithm")


@handles("to_apply", "calls", "condition", "body", "select", "scatter", "true_computation",
         "false_computation")
def _computation(cur: Cursor, rec: InstrRec, attr: str) -> None:
    rec.comps[attr] = [name_ref(cur)]


@handles("branch_computations", "called_computations")
def _computations(cur: Cursor, rec: InstrRec, attr: str) -> None:
    rec.comps[attr] = name_list(cur)


@handles("control-predecessors")
def _control(cur: Cursor, rec: InstrRec, attr: str) -> None:
    rec.preds = name_list(cur)


@handles("metadata")
def _metadata(cur: Cursor, rec: InstrRec, attr: str) -> None:
    rec.metadata = metadata(cur)


@handles("epsilon")
def _epsilon(cur: Cursor, rec: InstrRec, attr: str) -> None:
    lit = parse_literal(cur, Shape.scalar(PrimitiveType.F32))
    rec.fields["epsilon"] = float(lit.array)


@handles("literal")
def _literal(cur: Cursor, rec: InstrRec, attr: str) -> None:
    rec.fields["literal"] = parse_literal(cur, parse_shape(cur))


# ---- finishing ----------------------------------------------------------------------------
_DOT_KEYS = ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims")
_GATHER_KEYS = ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim",
                "operand_batching_dims", "start_indices_batching_dims")
_SCATTER_KEYS = ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims",
                 "index_vector_dim", "input_batching_dims", "scatter_indices_batching_dims")
_PART_OWNERS = {
    **{k: (O.DOT, O.RAGGED_DOT) for k in _DOT_KEYS},
    **{k: (O.GATHER,) for k in _GATHER_KEYS if k != "index_vector_dim"},
    **{k: (O.SCATTER,) for k in _SCATTER_KEYS if k != "index_vector_dim"},
    "index_vector_dim": (O.GATHER, O.SCATTER), "slice_sizes": (O.GATHER,),
    "left_side": (O.TRIANGULAR_SOLVE,), "unit_diagonal": (O.TRIANGULAR_SOLVE,),
    "transpose_a": (O.TRIANGULAR_SOLVE,), "lower": (O.TRIANGULAR_SOLVE, O.CHOLESKY),
    "operand_precision": (O.DOT, O.RAGGED_DOT, O.CONVOLUTION, O.CUSTOM_CALL),
    "algorithm": (O.DOT, O.RAGGED_DOT, O.CONVOLUTION, O.CUSTOM_CALL),
}


def finalize(cur: Cursor, rec: InstrRec) -> dict:
    """The Attrs keyword arguments of a parsed instruction."""
    p, f, op = rec.parts, rec.fields, rec.opcode
    for key in p:
        if op not in _PART_OWNERS[key]:
            raise cur.error(f"attribute '{key}' does not apply to {op.value}", rec.pos)
    if op in (O.DOT, O.RAGGED_DOT):
        f["dot_dnums"] = DotDimensionNumbers(*(tuple(p.get(k, ())) for k in _DOT_KEYS))
    if "operand_precision" in p or "algorithm" in p:
        f["precision_config"] = PrecisionConfig(tuple(p.get("operand_precision", ())),
                                                p.get("algorithm", 0))
    if op == O.GATHER:
        f["gather_dnums"] = GatherDimensionNumbers(*(p.get(k, ()) if k != "index_vector_dim"
                                                     else p.get(k, 0) for k in _GATHER_KEYS))
        if "slice_sizes" in p:
            f["gather_slice_sizes"] = p["slice_sizes"]
    if op == O.SCATTER:
        f["scatter_dnums"] = ScatterDimensionNumbers(*(p.get(k, ()) if k != "index_vector_dim"
                                                       else p.get(k, 0) for k in _SCATTER_KEYS))
    if op == O.TRIANGULAR_SOLVE:
        f["triangular_solve_options"] = TriangularSolveOptions(
            p.get("left_side", False), p.get("lower", False), p.get("unit_diagonal", False),
            p.get("transpose_a", 0))
    if op == O.CHOLESKY:
        f["cholesky_options"] = CholeskyOptions(p.get("lower", False))
    return f


# Attributes (or computation slots) an opcode cannot do without.
REQUIRED: dict[O, tuple[str, ...]] = {
    O.GET_TUPLE_ELEMENT: ("index",), O.COMPARE: ("direction",), O.SLICE: ("slice",),
    O.DYNAMIC_SLICE: ("dynamic_slice_sizes",), O.PAD: ("padding",), O.IOTA: ("iota_dimension",),
    O.CONVOLUTION: ("dim_labels",), O.FUSION: ("kind", "calls"),
    O.WHILE: ("condition", "body"), O.CALL: ("to_apply",), O.MAP: ("to_apply",),
    O.REDUCE: ("to_apply", "dimensions"), O.SORT: ("to_apply", "dimensions"),
    O.REDUCE_WINDOW: ("to_apply",), O.SCATTER: ("to_apply", "update_window_dims",
                                                "inserted_window_dims",
                                                "scatter_dims_to_operand_dims", "index_vector_dim"),
    O.SELECT_AND_SCATTER: ("select", "scatter"), O.ALL_REDUCE: ("to_apply",),
    O.REDUCE_SCATTER: ("to_apply", "dimensions"), O.ALL_GATHER: ("dimensions",),
    O.GATHER: ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim",
               "slice_sizes"),
    O.FFT: ("fft_type", "fft_length"), O.RNG: ("distribution",), O.RNG_BIT_GENERATOR: ("algorithm",),
    O.REDUCE_PRECISION: ("exponent_bits", "mantissa_bits"), O.TRANSPOSE: ("dimensions",),
    O.REVERSE: ("dimensions",), O.CONCATENATE: ("dimensions",), O.CUSTOM_CALL: ("custom_call_target",),
    O.TOPK: ("k",), O.BATCH_NORM_TRAINING: ("epsilon", "feature_index"),
    O.BATCH_NORM_INFERENCE: ("epsilon", "feature_index"), O.BATCH_NORM_GRAD: ("epsilon", "feature_index"),
    O.RNG_GET_AND_UPDATE_STATE: ("delta",), O.GET_DIMENSION_SIZE: ("dimensions",),
    O.SET_DIMENSION_SIZE: ("dimensions",), O.COLLECTIVE_PERMUTE: ("source_target_pairs",),
    O.ASYNC_START: ("calls",),
}
