"""Attribute values in HLO text: shapes, integer lists, windows, dim labels, padding, slice
ranges, aliasing, metadata, frontend attributes, replica groups and module-header values.

Each reader takes a Cursor positioned at the value and returns a plain value or an IR record.
"""

from __future__ import annotations

import re

from .. import dtypes
from ..attrs import (
    ConvDimensionNumbers,
    OpMetadata,
    OutputOperandAliasing,
    PaddingDim,
    SliceDim,
    Window,
    WindowDimension,
)
from ..module import AliasEntry, BufferDonor
from ..replica_groups import MESH_GROUPS, IotaReplicaGroups, ReplicaGroupList, mesh_groups_from_text
from ..shape import Layout, Shape, Tile
from .lexer import ATTR_NAME, NAME, WORD, Cursor, token

# ---- shapes -------------------------------------------------------------------------------
_ARRAY_SHAPE = token(r"([a-z][a-z0-9]*)\[([^\]\n]*)\](?:[ \t\r\n]*(\{(?=[ \t\r\n]*[\d:])[^{}]*\}))?")
_DIM = re.compile(r"\s*(?:(\?)|(<=)?\s*(\d+))\s*")
_LAYOUT = re.compile(r"\{\s*((?:\d+\s*(?:,\s*\d+\s*)*)?)(?::\s*(?:T((?:\([\d,*\s]*\))+))?"
                     r"(?:E\((\d+)\))?(?:S\((\d+)\))?\s*)?\}")
_SHAPES: dict[str, Shape] = {}  # shape text -> Shape (shapes are immutable, texts repeat a lot)
UNBOUNDED = -(1 << 63)


def cached_shape(text: str) -> Shape | None:
    """The Shape of an array-shape text seen before (a fast path for the parser)."""
    return _SHAPES.get(text)


def parse_shape(cur: Cursor) -> Shape:
    """An array shape `f32[2,<=3]{1,0}` (missing layouts become row-major) or a tuple `(..)`."""
    if cur.eat("("):
        elems = []
        if not cur.eat(")"):
            while True:
                elems.append(parse_shape(cur))
                if cur.eat(")"):
                    break
                cur.expect_char(",", "',' or ')' in a tuple shape")
        return Shape.tuple_of(elems)
    m = cur.expect(_ARRAY_SHAPE, "a shape like f32[2,3]{1,0}")
    key = m.group(0)[m.start(1) - m.start():]
    shape = _SHAPES.get(key)
    if shape is None:
        shape = _array_shape(cur, m)
        if len(_SHAPES) < 100_000:
            _SHAPES[key] = shape
    return shape


def _array_shape(cur: Cursor, m: re.Match) -> Shape:
    type_name = m.group(1)
    if not dtypes.is_type_name(type_name) or type_name in ("tuple", "buffer", "invalid"):
        raise cur.error(f"unknown element type '{type_name}'", m.start(1))
    dims, dynamic = [], []
    if m.group(2).strip():
        for part in m.group(2).split(","):
            d = _DIM.fullmatch(part)
            if d is None:
                raise cur.error(f"bad dimension '{part.strip()}' in shape", m.start(2))
            dims.append(UNBOUNDED if d.group(1) else int(d.group(3)))
            dynamic.append(bool(d.group(1) or d.group(2)))
    et = dtypes.from_name(type_name)
    if et in (dtypes.PrimitiveType.TOKEN, dtypes.PrimitiveType.OPAQUE_TYPE):
        if dims or m.group(3):
            raise cur.error(f"{type_name} shapes have no dimensions or layout", m.start(1))
        return Shape(et)
    layout = _layout(cur, m, len(dims)) if m.group(3) else Layout.row_major(len(dims))
    return Shape.array(et, dims, layout, dynamic)


def _layout(cur: Cursor, m: re.Match, rank: int) -> Layout:
    lm = _LAYOUT.fullmatch(m.group(3))
    if lm is None:
        raise cur.error("unsupported or malformed layout (hloc reads minor-to-major, T(..), "
                        "E(..) and S(..))", m.start(3))
    m2m = tuple(int(v) for v in lm.group(1).split(",")) if lm.group(1).strip() else ()
    if sorted(m2m) != list(range(rank)):
        raise cur.error(f"layout {{{lm.group(1)}}} is not a permutation of the {rank} dimensions",
                        m.start(3))
    tiles: tuple[Tile, ...] = ()
    if lm.group(2):
        tiles = tuple(Tile(tuple(UNBOUNDED if v.strip() == "*" else int(v)
                                 for v in t.split(",") if v.strip()))
                      for t in re.findall(r"\(([^)]*)\)", lm.group(2)))
    return Layout(m2m, tiles, int(lm.group(3) or 0), int(lm.group(4) or 0))


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


_MESH_GROUPS = token(MESH_GROUPS.pattern)
_IOTA_GROUPS = token(r"\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def replica_groups(cur: Cursor) -> tuple[tuple[tuple[int, ...], ...], ReplicaGroupList | None]:
    """Explicit `{{0,1},{2,3}}`, iota `[2,2]<=[4]` or mesh `mesh['x'=4] {'x'}` groups: returns
    (the expanded groups, the compact encoding or None)."""
    if cur.peek() == "{":
        return int_list_list(cur), None
    start = cur.skip_ws()
    mesh = cur.match(_MESH_GROUPS)
    form: ReplicaGroupList
    try:
        if mesh is not None:
            form = mesh_groups_from_text(*mesh.groups())
        else:
            m = cur.expect(_IOTA_GROUPS, "replica groups like {{0,1}}, [2,2]<=[4] or mesh[...]")
            dims = tuple(int(v) for v in m.group(3).split(","))
            perm = tuple(int(v) for v in m.group(4).split(",")) if m.group(4) else ()
            form = IotaReplicaGroups(int(m.group(1)), int(m.group(2)), dims, perm)
        return form.groups(), form
    except ValueError as e:
        raise cur.error(str(e), start) from None


# ---- module header values -----------------------------------------------------------------
def _computation_layout(cur: Cursor):
    cur.expect_char("{")
    cur.expect_char("(", "'(' to start the parameter layouts")
    params = []
    if not cur.eat(")"):
        while True:
            params.append(parse_shape(cur))
            if cur.eat(")"):
                break
            cur.expect_char(",", "',' or ')'")
    cur.expect_char("->")
    result = parse_shape(cur)
    cur.expect_char("}", "'}' to end entry_computation_layout")
    return tuple(params), result


def _alias_list(cur: Cursor, with_output: bool) -> list:
    cur.expect_char("{")
    out: list = []
    if cur.eat("}"):
        return out
    while True:
        output = int_list(cur) if with_output else None
        if with_output:
            cur.expect_char(":")
        cur.expect_char("(")
        param = cur.expect_int("a parameter number")
        cur.expect_char(",")
        index = int_list(cur)
        kind = 1
        if with_output and cur.eat(","):
            word = cur.expect_name("may-alias or must-alias")
            if word not in ("may-alias", "must-alias"):
                raise cur.error(f"unknown alias kind '{word}' (expected may-alias or must-alias)")
            kind = 2 if word == "must-alias" else 1
        cur.expect_char(")")
        out.append(AliasEntry(output, param, index, kind) if with_output else BufferDonor(param, index))
        if cur.eat("}"):
            return out
        cur.expect_char(",", "',' or '}'")


MODULE_READERS = {
    "is_scheduled": Cursor.expect_bool,
    "entry_computation_layout": _computation_layout,
    "input_output_alias": lambda c: _alias_list(c, True),
    "buffer_donor": lambda c: _alias_list(c, False),
    "replica_count": Cursor.expect_int,
    "num_partitions": Cursor.expect_int,
    "frontend_attributes": frontend_attributes,
}


