"""Instruction attribute parsing for HLO text: one handler per attribute name (a registry).

Handlers read the value at the cursor and store it on the instruction record; `finalize`
turns the record's pieces into typed Attrs. Attributes XLA prints that carry no meaning for
hloc (listed in IGNORED) are read and dropped; known XLA attributes hloc cannot represent
(UNSUPPORTED) and unknown names are ParseErrors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .attrs import (
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
from .dtypes import PrimitiveType
from .lexer import ATTR_NAME, NAME, WORD, Cursor, parse_shape, token
from .literal_text import parse_literal
from .opcodes import Opcode as O
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
from .shape import Shape

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
        self.shape = None
        self.opcode: O | None = None
        self.operands: list[tuple[str, int, object]] = []  # (name, pos, inline shape or None)
        self.fields: dict = {}  # Attrs keyword arguments
        self.parts: dict = {}  # pieces of composite attributes (dot dims, precision, ...)
        self.comps: dict[str, list[tuple[str, int]]] = {}  # slot -> computation references
        self.preds: list[tuple[str, int]] = []
        self.metadata: OpMetadata | None = None
        self.seen: set[str] = set()


Handler = Callable[[Cursor, InstrRec, str], None]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str):
    def register(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn
    return register


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


# ---- value readers ------------------------------------------------------------------------
_DXD = token(r"(\d+(?:x\d+)*)(?![\w.])")
_PAD = token(r"(-?\d+_-?\d+(?:_\d+)?(?:x-?\d+_-?\d+(?:_\d+)?)*)(?![\w.])")
_DIM_LABELS = token(r"([0-9bf?]{2,})_([0-9io?]{2,})->([0-9bf?]{2,})")
_BARE = token(r"[^,\s{}()]+")


def skip_value(cur: Cursor) -> None:
    """Consume one attribute value of any form (braced, quoted or a bare word)."""
    c = cur.peek()
    if c == "{":
        cur.raw_braced()
    elif c in "\"'" and c:
        cur.expect_string()
    else:
        cur.expect(_BARE, "an attribute value")


def int_list(cur: Cursor, open_: str = "{", close: str = "}", sep: str = ",") -> tuple[int, ...]:
    cur.expect_char(open_)
    out: list[int] = []
    if not cur.eat(close):
        while True:
            out.append(cur.expect_int())
            if cur.eat(close):
                break
            cur.expect_char(sep, f"'{sep}' or '{close}'")
    return tuple(out)


def int_list_list(cur: Cursor) -> tuple[tuple[int, ...], ...]:
    cur.expect_char("{")
    out = []
    if not cur.eat("}"):
        while True:
            out.append(int_list(cur))
            if cur.eat("}"):
                break
            cur.expect_char(",", "',' or '}'")
    return tuple(out)


def word_list(cur: Cursor) -> list[tuple[str, int]]:
    cur.expect_char("{")
    out = []
    if not cur.eat("}"):
        while True:
            m = cur.expect(WORD, "a name")
            out.append((m.group(1), m.start(1)))
            if cur.eat("}"):
                break
            cur.expect_char(",", "',' or '}'")
    return out


def name_ref(cur: Cursor) -> tuple[str, int]:
    if cur.peek() == "{":
        raise cur.error("inline computations are not supported; define the computation and name it")
    m = cur.expect(NAME, "a computation name")
    return m.group(1), m.start(1)


def name_list(cur: Cursor) -> list[tuple[str, int]]:
    cur.expect_char("{")
    out = [] if cur.peek() == "}" else [name_ref(cur)]
    while cur.eat(","):
        out.append(name_ref(cur))
    cur.expect_char("}", "'}' to end the name list")
    return out


def enum_value(cur: Cursor, names: dict[int, str], what: str) -> int:
    m = cur.expect(WORD, what)
    for value, text in names.items():
        if text == m.group(1):
            return value
    raise cur.error(f"unknown {what} '{m.group(1)}' (expected one of: {', '.join(names.values())})",
                    m.start(1))


def choice(cur: Cursor, options: tuple[str, ...], what: str) -> str:
    m = cur.expect(WORD, what)
    if m.group(1) not in options:
        raise cur.error(f"unknown {what} '{m.group(1)}' (expected one of: {', '.join(options)})",
                        m.start(1))
    return m.group(1)


def string_or_dict(cur: Cursor) -> str:
    return cur.raw_braced() if cur.peek() == "{" else cur.expect_string()


def shape_list(cur: Cursor) -> tuple:
    cur.expect_char("{")
    out = [] if cur.peek() == "}" else [parse_shape(cur)]
    while cur.eat(","):
        out.append(parse_shape(cur))
    cur.expect_char("}", "'}' to end the shape list")
    return tuple(out)


def window(cur: Cursor) -> Window:
    start = cur.skip_ws()
    cur.expect_char("{")
    fields: dict[str, list] = {}
    while not cur.eat("}"):
        m = cur.expect(ATTR_NAME, "a window field (size=, stride=, pad=, lhs_dilate=, ...)")
        key = m.group(1)
        if key in fields:
            raise cur.error(f"window field '{key}' appears twice", m.start(1))
        if key == "pad":
            text = cur.expect(_PAD, "window padding like 1_1x0_0").group(1)
            fields[key] = [tuple(int(v) for v in d.split("_")) for d in text.split("x")]
            if any(len(p) != 2 for p in fields[key]):
                raise cur.error("window padding is low_high per dimension", m.end())
        elif key in ("size", "stride", "lhs_dilate", "rhs_dilate", "rhs_reversal"):
            fields[key] = [int(v) for v in cur.expect(_DXD, f"{key} like 3x3").group(1).split("x")]
        else:
            raise cur.error(f"unknown window field '{key}'", m.start(1))
    size = fields.get("size", [])
    for key, values in fields.items():
        if len(values) != len(size):
            raise cur.error(f"window {key}= has {len(values)} dimensions but size= has {len(size)}", start)

    def get(key, i, default):
        return fields[key][i] if key in fields else default

    return Window(tuple(WindowDimension(
        size=s, stride=get("stride", i, 1), padding_low=get("pad", i, (0, 0))[0],
        padding_high=get("pad", i, (0, 0))[1], window_dilation=get("rhs_dilate", i, 1),
        base_dilation=get("lhs_dilate", i, 1), window_reversal=get("rhs_reversal", i, 0) == 1)
        for i, s in enumerate(size)))


def dim_labels(cur: Cursor) -> ConvDimensionNumbers:
    m = cur.expect(_DIM_LABELS, "dim labels like b01f_01io->b01f")
    lhs, rhs, out = (_labels(cur, m.group(g), m.start(g), a, b)
                     for g, a, b in ((1, "b", "f"), (2, "i", "o"), (3, "b", "f")))
    if not len(lhs[2]) == len(rhs[2]) == len(out[2]):
        raise cur.error("input, kernel and output need the same number of spatial dimensions", m.start(1))
    return ConvDimensionNumbers(lhs[0], lhs[1], lhs[2], rhs[0], rhs[1], rhs[2], out[0], out[1], out[2])


def _labels(cur: Cursor, text: str, pos: int, first: str, second: str):
    chars = [c for c in text if c != "?"]
    spatial = [c for c in chars if c not in (first, second)]
    if len(set(chars)) != len(chars) or first not in chars or second not in chars:
        raise cur.error(f"dim labels '{text}' need exactly one '{first}', one '{second}' and "
                        "distinct spatial digits", pos)
    if sorted(spatial) != [str(i) for i in range(len(spatial))]:
        raise cur.error(f"spatial dimensions in '{text}' must be 0..{len(spatial) - 1}", pos)
    index = {c: i for i, c in enumerate(text) if c != "?"}
    return index[first], index[second], tuple(index[str(i)] for i in range(len(spatial)))


def padding(cur: Cursor) -> tuple[PaddingDim, ...]:
    m = cur.match(_PAD)
    if m is None:
        if cur.peek() in (",", "}", ""):
            return ()  # a rank-0 pad prints an empty config
        raise cur.error("expected padding like 0_0x1_2_0")
    dims = []
    for d in m.group(1).split("x"):
        v = [int(x) for x in d.split("_")]
        dims.append(PaddingDim(v[0], v[1], v[2] if len(v) == 3 else 0))
    return tuple(dims)


def slice_ranges(cur: Cursor) -> tuple[SliceDim, ...]:
    cur.expect_char("{")
    out = []
    if not cur.eat("}"):
        while True:
            start = cur.skip_ws()
            r = int_list(cur, "[", "]", ":")
            if len(r) not in (2, 3):
                raise cur.error("a slice range is [start:limit] or [start:limit:stride]", start)
            out.append(SliceDim(r[0], r[1], r[2] if len(r) == 3 else 1))
            if cur.eat("}"):
                break
            cur.expect_char(",", "',' or '}'")
    return tuple(out)


def aliasing(cur: Cursor) -> tuple[OutputOperandAliasing, ...]:
    cur.expect_char("{")
    out = []
    if not cur.eat("}"):
        while True:
            output = int_list(cur)
            cur.expect_char(":")
            cur.expect_char("(")
            operand = cur.expect_int()
            cur.expect_char(",")
            operand_index = int_list(cur)
            cur.expect_char(")")
            out.append(OutputOperandAliasing(output, operand, operand_index))
            if cur.eat("}"):
                break
            cur.expect_char(",", "',' or '}'")
    return tuple(out)


def frontend_attributes(cur: Cursor) -> tuple[tuple[str, str], ...]:
    cur.expect_char("{")
    items: dict[str, str] = {}
    if not cur.eat("}"):
        while True:
            key = cur.expect(ATTR_NAME, "key=value").group(1)
            items[key] = string_or_dict(cur)
            if cur.eat("}"):
                break
            cur.expect_char(",", "',' or '}'")
    return tuple(sorted(items.items()))


_META_STR = ("op_type", "op_name", "source_file", "deduplicated_name", "scheduling_name")
_META_INT = ("source_line", "source_end_line", "source_column", "source_end_column", "stack_frame_id")


def metadata(cur: Cursor) -> OpMetadata:
    cur.expect_char("{")
    values: dict = {}
    while not cur.eat("}"):
        cur.eat(",")
        m = cur.expect(ATTR_NAME, "a metadata field (op_name=...)")
        key = m.group(1)
        if key in _META_STR:
            values[key] = cur.expect_string()
        elif key in _META_INT:
            values[key] = cur.expect_int()
        elif key == "profile_type":
            int_list(cur)  # profiling data: dropped
        else:
            raise cur.error(f"unknown metadata field '{key}'", m.start(1))
    return OpMetadata(**values)


_IOTA_GROUPS = token(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def replica_groups(cur: Cursor) -> tuple[tuple[int, ...], ...]:
    if cur.peek() == "{":
        return int_list_list(cur)
    m = cur.expect(_IOTA_GROUPS, "replica groups like {{0,1}} or [2,2]<=[4]")
    dims = [int(v) for v in m.group(3).split(",")]
    perm = [int(v) for v in m.group(4).split(",")] if m.group(4) else list(range(len(dims)))
    groups, size = int(m.group(1)), int(m.group(2))
    if sorted(perm) != list(range(len(dims))) or int(np.prod(dims)) != groups * size:
        raise cur.error("inconsistent iota replica groups", m.start())
    ids = np.arange(groups * size).reshape(dims).transpose(perm).reshape(groups, size)
    return tuple(tuple(int(v) for v in row) for row in ids)


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
    ("replica_groups", "replica_groups", replica_groups),
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
    HANDLERS[_name] = _field(_attr, _reader)

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
    HANDLERS[_name] = _part(_reader)


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
