"""Constants in HLO text, parsed: the literal inside `constant(...)` (XLA's spelling, as
literal_text.py prints it) to a Literal of the declared shape, bit-exactly.

A large array's body is read by one regular-expression pass over its numbers where its layout
is regular (`_fast_body`), else token by token with positions for the error message
(`_BodyWalk`). Constants that a dump elided as `{...}` parse to None (the caller keeps a
literal-less constant and reports it only if the value is needed). Kept apart from the
printer, whose module a compile imports (the bundle's module.hlo), so that its patterns are
compiled only where text is parsed.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from .. import dtypes
from ..dtypes import PrimitiveType as P
from ..literal import Literal
from ..shape import Shape
from .lexer import Cursor
from .literal_text import FloatFormat, float_format_of

if TYPE_CHECKING:
    import numpy as np

_DEC = r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NUM = rf"-?(?:nan(?:\(0x[0-9a-fA-F]+\))?|inf|{_DEC})|true|false"
_BODY_TOKEN = re.compile(rf"[ \t\r\n,]+|/\*(?:[^*]|\*(?!/))*\*/|//[^\n]*|(\{{)|(\}})|\(\s*({_NUM})\s*,\s*({_NUM})\s*\)|({_NUM})|(\.\.\.)")
_INT_RE = re.compile(r"-?\d+")
_SCALAR = re.compile(r"(?:[ \t\r\n]+|/\*(?:[^*]|\*(?!/))*\*/|//[^\n]*)*(?:\(\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*\)|(" + _NUM + r"))(?![\w.(])")


def parse_literal(cur: Cursor, shape: Shape) -> Literal | None:
    """Parse a literal of `shape` at the cursor (the text inside `constant(...)`).

    Returns None for an elided `{...}` constant.
    """
    if shape.is_tuple:
        return _parse_tuple(cur, shape)
    if not shape.is_array or shape.dtype.np_dtype is None:
        raise cur.error(f"constants of type {shape.dtype.name} are not supported")
    if cur.peek() != "{":
        if shape.rank != 0:
            raise cur.error(f"expected '{{' to start a literal of rank {shape.rank}")
        return _parse_scalar(cur, shape)
    start = cur.pos
    body = cur.raw_braced()
    if body[1:-1].strip() == "...":
        return None
    values = _fast_body(body, shape.dims)
    if values is not None:
        try:
            return Literal(shape, _to_array(cur, values, [], shape, start))
        except ValueError:
            pass  # a malformed number: the walker below says which and where
    values, cplx = _walk_body(cur, body, start, shape.dims)
    return Literal(shape, _to_array(cur, values, cplx, shape, start))


def _parse_tuple(cur: Cursor, shape: Shape) -> Literal | None:
    cur.expect_char("(", "'(' to start a tuple literal")
    elements = []
    for i, sub in enumerate(shape.tuple_shapes):
        if i:
            cur.expect_char(",", "',' between tuple literal elements")
        elements.append(parse_literal(cur, sub))
    cur.expect_char(")", "')' to end the tuple literal")
    if any(e is None for e in elements):
        return None
    return Literal(shape, elements=tuple(elements))


def _parse_scalar(cur: Cursor, shape: Shape) -> Literal:
    start = cur.skip_ws()
    m = cur.expect(_SCALAR, f"a {shape.dtype.name} value")
    if m.group(3) is not None:
        values, cplx = [m.group(3)], []
    else:
        values, cplx = [m.group(1)], [m.group(2)]
    return Literal(shape, _to_array(cur, values, cplx, shape, start))


_ROW = re.compile(r"\{([^{}]*)\}")
_COMMENTS = re.compile(r"/\*(?:[^*]|\*(?!/))*\*/|//[^\n]*")
_SKELETON = re.compile(r"[ \t\r\n,]+|(\{)|(\})|(R)")
_NUMS = re.compile(rf"(?:{_NUM})(?: (?:{_NUM}))*")
_DIGITS_ONLY = re.compile(r"[0-9eE.+\- ]*")
_LEADING_PLUS = re.compile(r"(?:^| )\+")
_INT_LIST = re.compile(r"-?\d+(?: -?\d+)*")


def _plain_numbers(values: list[str]) -> bool:
    """A cheap check that the texts are numbers: only digits and signs (malformed ones such as
    `1.2.3` then fail numeric conversion, and the exact walker reports them)."""
    joined = " ".join(values)
    if _DIGITS_ONLY.fullmatch(joined):
        return _LEADING_PLUS.search(joined) is None
    return _NUMS.fullmatch(joined) is not None


def _fast_body(body: str, dims: tuple[int, ...]) -> list[str] | None:
    """The element texts of a well-formed real-valued body using C-speed splitting, or None
    (then the exact walker runs and reports any error where it is)."""
    if "(" in body or "..." in body:
        return None
    if "/" in body:
        body = _COMMENTS.sub(" ", body)
    rows: list[str] = []

    def take(m: re.Match) -> str:
        rows.append(m.group(1))
        return " R "

    skeleton = _ROW.sub(take, body)
    if not _skeleton_ok(skeleton, dims[:-1]):
        return None
    values: list[str] = []
    for row in rows:
        items = row.replace(",", " ").split()
        if len(items) != dims[-1]:
            return None
        values += items
    return values if _plain_numbers(values) else None


def _skeleton_ok(skeleton: str, dims: tuple[int, ...]) -> bool:
    """Whether `skeleton` (innermost rows replaced by R) nests exactly like an array of dims."""
    counts = [0] * (len(dims) + 1)
    depth = 0
    for m in _SKELETON.finditer(skeleton):
        if m.lastindex == 1:
            depth += 1
            if depth > len(dims) or (depth > 1 and _bump(counts, depth - 2, dims)):
                return False
        elif m.lastindex == 2:
            if depth == 0 or counts[depth - 1] != dims[depth - 1]:
                return False
            counts[depth - 1] = 0
            depth -= 1
        elif m.lastindex == 3:
            if depth != len(dims) or (dims and _bump(counts, depth - 1, dims)):
                return False
            counts[-1] += not dims
    consumed = sum(len(m.group(0)) for m in _SKELETON.finditer(skeleton))
    return depth == 0 and consumed == len(skeleton) and (bool(dims) or counts[-1] == 1)


def _bump(counts: list[int], dim: int, dims: tuple[int, ...]) -> bool:
    """Count one more element in dim; True when that is too many."""
    counts[dim] += 1
    return counts[dim] > dims[dim]


def _walk_body(cur: Cursor, body: str, base: int, dims: tuple[int, ...]):
    """Check the brace structure against dims; return the element texts (and imaginary parts)."""
    walk = _BodyWalk(cur, base, dims)
    pos = 0
    while pos < len(body):
        m = _BODY_TOKEN.match(body, pos)
        if m is None:
            raise cur.error("unexpected text in literal", base + pos)
        kind = m.lastindex
        if kind == 1:
            walk.open(pos)
        elif kind == 2:
            walk.close(pos)
        elif kind in (3, 4):  # a complex element: groups 3 and 4 hold its parts
            walk.element(pos, m.group(3), m.group(4))
        elif kind == 5:
            walk.element(pos, m.group(5), None)
        elif kind == 6:
            raise cur.error("'...' (an elided constant) is only allowed as the whole literal", base + pos)
        pos = m.end()
    if walk.imag and len(walk.imag) != len(walk.values):
        raise cur.error("mixes complex and real elements", base)
    return walk.values, walk.imag


class _BodyWalk:
    """Brace-nesting bookkeeping of a literal body (how many elements each dimension saw)."""

    def __init__(self, cur: Cursor, base: int, dims: tuple[int, ...]):
        self.cur, self.base, self.dims = cur, base, dims
        self.seen = [0] * (len(dims) + 1)
        self.depth = 0
        self.values: list[str] = []
        self.imag: list[str] = []

    def _count(self, dim: int, pos: int) -> None:
        self.seen[dim] += 1
        if self.seen[dim] > self.dims[dim]:
            raise self.cur.error(f"too many elements in dimension {dim} (expected {self.dims[dim]})",
                                 self.base + pos)

    def open(self, pos: int) -> None:
        self.depth += 1
        if self.depth > len(self.dims):
            raise self.cur.error(f"literal nests deeper than its rank {len(self.dims)}", self.base + pos)
        if self.depth > 1:
            self._count(self.depth - 2, pos)

    def close(self, pos: int) -> None:
        dim = self.depth - 1
        if self.seen[dim] != self.dims[dim]:
            raise self.cur.error(f"expected {self.dims[dim]} elements in dimension {dim}, "
                                 f"found {self.seen[dim]}", self.base + pos)
        self.seen[dim] = 0
        self.depth -= 1

    def element(self, pos: int, value: str, imag: str | None) -> None:
        rank = len(self.dims)
        if self.depth != rank:
            raise self.cur.error(f"element at nesting depth {self.depth} of a rank-{rank} literal",
                                 self.base + pos)
        self._count(rank - 1, pos)
        self.values.append(value)
        if imag is not None:
            self.imag.append(imag)


def _to_array(cur: Cursor, values: list[str], imag: list[str], shape: Shape, pos: int) -> np.ndarray:
    import numpy as np

    ptype = shape.element_type
    info = dtypes.info(ptype)
    if info.is_complex:
        if len(imag) != len(values):
            raise cur.error(f"{info.name} elements are written (real, imag)", pos)
        part = P.F32 if ptype == P.C64 else P.F64
        out = np.empty(len(values), dtype=info.np_dtype)
        out.real = _floats(cur, values, part, pos)  # part-wise copies keep NaN payload bits
        out.imag = _floats(cur, imag, part, pos)
        return out.reshape(shape.dims)
    if imag:
        raise cur.error(f"complex value in a {info.name} literal", pos)
    if ptype == P.PRED:
        return _preds(cur, values, pos).reshape(shape.dims)
    if info.is_integral:
        return _ints(cur, values, ptype, pos).reshape(shape.dims)
    return _floats(cur, values, ptype, pos).reshape(shape.dims)


def _preds(cur: Cursor, values: list[str], pos: int) -> np.ndarray:
    import numpy as np

    table = {"true": True, "false": False, "1": True, "0": False, "-0": False}
    try:
        return np.array([table[v] for v in values], dtype=np.bool_)
    except KeyError as e:
        raise cur.error(f"pred literal element {e.args[0]} is not true/false/0/1", pos) from None


def _ints(cur: Cursor, values: list[str], ptype: P, pos: int) -> np.ndarray:
    import numpy as np

    if values and not _INT_LIST.fullmatch(" ".join(values)):
        bad = next(v for v in values if not _INT_RE.fullmatch(v))
        raise cur.error(f"expected an integer for {dtypes.name(ptype)}, found '{bad}'", pos)
    try:
        ints = np.array(values, dtype=np.str_).astype(np.int64)
    except OverflowError:  # beyond int64 (u64 values): exact Python integers
        ints = np.array([int(v) for v in values], dtype=object)
    lo, hi = dtypes.info(ptype).int_range
    if len(ints) and (ints.min() < lo or ints.max() > hi):
        v = next(x for x in ints.tolist() if x < lo or x > hi)
        raise cur.error(f"value {v} is out of range for {dtypes.name(ptype)} [{lo}, {hi}]", pos)
    return ints.astype(dtypes.to_numpy(ptype))


def _floats(cur: Cursor, values: list[str], ptype: P, pos: int) -> np.ndarray:
    import numpy as np

    fmt = float_format_of(ptype)
    bad = next((v for v in values if v in ("true", "false")), None)
    if bad is not None:
        raise cur.error(f"expected a number for {dtypes.name(ptype)}, found '{bad}'", pos)
    nans = [i for i, v in enumerate(values) if "nan" in v]
    texts = [("1" if "nan" in v else v) for v in values] if nans else values
    wide = np.array(texts, dtype=np.float64) if texts else np.zeros(0)
    too_big = np.isinf(wide) & np.array(["inf" not in t for t in texts], dtype=bool)
    if too_big.any():
        raise cur.error(f"value {values[int(np.flatnonzero(too_big)[0])]} is out of range for a double", pos)
    with np.errstate(all="ignore"):
        out = wide.astype(fmt.np_dtype)
    back = out.astype(np.float64)
    overflow = np.isfinite(wide) & ~np.isfinite(back)
    if overflow.any():
        i = int(np.flatnonzero(overflow)[0])
        raise cur.error(f"value {values[i]} is out of range for {dtypes.name(ptype)}", pos)
    inf = np.isinf(wide) & ~np.isinf(back) & ~np.isnan(back)
    if inf.any() and not fmt.has_nan:
        raise cur.error(f"{dtypes.name(ptype)} cannot represent {values[int(np.flatnonzero(inf)[0])]}", pos)
    if nans:
        bits = out.view(fmt.uint)
        for i in nans:
            bits[i] = _nan_bits(cur, values[i], fmt, ptype, pos)
    return out


def _nan_bits(cur: Cursor, text: str, fmt: FloatFormat, ptype: P, pos: int) -> int:
    import numpy as np

    if not fmt.has_nan:
        raise cur.error(f"{dtypes.name(ptype)} has no NaN", pos)
    negative = text.startswith("-")
    m = re.search(r"\(0x([0-9a-fA-F]+)\)", text)
    if not fmt.payload:
        if m is not None:
            raise cur.error(f"{dtypes.name(ptype)} does not support NaN payloads", pos)
        value = np.array(-math.nan if negative else math.nan).astype(fmt.np_dtype)
        return int(value.view(fmt.uint))
    mask = (1 << fmt.nmant) - 1
    payload = int(m.group(1), 16) if m else 1 << (fmt.nmant - 1)
    if payload == 0 or payload > mask:
        raise cur.error(f"NaN payload 0x{payload:x} is out of range for {dtypes.name(ptype)} (max 0x{mask:x})", pos)
    exponent = ((1 << (fmt.bits - 1 - fmt.nmant)) - 1) << fmt.nmant
    return (int(negative) << (fmt.bits - 1)) | exponent | payload
