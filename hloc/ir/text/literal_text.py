"""Constants in HLO text: XLA's spelling of literals, printed so that they parse back bit-exactly.

Printing follows xla/literal.cc (one-line form): rank-1 `{1, 2}`, higher ranks `{ {1, 2}, {3, 4} }`
with `/*iN=k*/` markers above rank 3, scalars bare, pred arrays as 0/1, complex `(re, im)`.
Floats use XLA's round-trip spelling: `%.{digits10}g` when that reads back to the same bits,
otherwise `%.{max_digits10}g`; `inf`, `-inf`, `nan`, `-nan` and `nan(0x...)` for NaN payloads.
literal_parse.py reads them back.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from ...util.record import dataclass
from .. import dtypes
from ..dtypes import PrimitiveType as P
from ..literal import Literal

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    """How one floating-point type is spelled: %g precisions to try and its NaN encoding."""

    np_dtype: np.dtype
    uint: np.dtype  # same-width unsigned type for bit views
    bits: int  # meaningful bits (4 for f4e2m1fn, which is stored in a byte)
    nmant: int
    digits: tuple[int, ...]  # precisions tried in order until the text reads back exactly
    payload: bool  # IEEE-like: NaN payloads exist and are printed as nan(0x...)
    has_nan: bool


def _float_format(ptype: P) -> FloatFormat:
    import ml_dtypes
    import numpy as np

    dt = dtypes.to_numpy(ptype)
    fi = np.finfo(dt) if ptype in (P.F16, P.F32, P.F64) else ml_dtypes.finfo(dt)
    nmant = int(fi.nmant)
    max10 = 2 + (nmant + 1) * 30103 // 100000
    digits = {P.F32: (6, 9), P.F64: (15, 17)}.get(ptype, (max10, max10 + 1, 17))
    ieee = ptype in (P.F16, P.BF16, P.F32, P.F64, P.F8E5M2, P.F8E4M3, P.F8E3M4)
    uint = np.dtype(f"uint{dt.itemsize * 8}")
    return FloatFormat(dt, uint, dtypes.info(ptype).bits, nmant, digits, ieee,
                       ptype != P.F4E2M1FN)


# Filled as each type is first printed or parsed (finfo for all of them at import: ~2 ms).
_FLOAT_FORMATS: dict[P, FloatFormat] = {}


def float_format_of(ptype: P) -> FloatFormat:
    """The spelling of float type `ptype` (made once per type)."""
    fmt = _FLOAT_FORMATS.get(ptype)
    if fmt is None:
        fmt = _FLOAT_FORMATS[ptype] = _float_format(ptype)
    return fmt


# ---- printing -----------------------------------------------------------------------------
def format_literal(literal: Literal | None) -> str:
    """The text between `constant(` and `)`; None (an elided constant) prints as `{...}`."""
    if literal is None:
        return "{...}"
    shape = literal.shape
    if shape.is_tuple:
        return "( " + ", ".join(format_literal(e) for e in literal.elements) + " )"
    if shape.is_token:
        return "token"
    texts = _format_python(literal)
    if texts is not None:
        return _nest(texts, shape.dims)
    arr = literal.array
    return _nest(format_elements(arr, shape.element_type), arr.shape)


# The IEEE types whose elements _format_python spells from Python floats, the same text as
# format_floats gives: (struct code of the value, of its bits, the bits' width, nmant, the
# precisions format_floats tries: _float_format's).
_PYTHON_FLOATS = {P.F16: ("e", "H", 16, 10, (5, 6, 17)), P.F32: ("f", "I", 32, 23, (6, 9)),
                  P.F64: ("d", "Q", 64, 52, (15, 17))}


def _format_python(literal: Literal) -> list[str] | None:
    """format_elements' text for a literal kept as bytes of a type ir/packing.py reads, without
    NumPy (a compile of a module with only small constants imports none); None otherwise."""
    values = literal.python_values()
    if values is None:
        return None
    ptype = literal.shape.element_type
    if ptype == P.PRED:
        if literal.shape.rank == 0:
            return ["true" if values[0] else "false"]
        return ["1" if v else "0" for v in values]
    spec = _PYTHON_FLOATS.get(ptype)
    if spec is None:
        return [str(v) for v in values]  # integers
    code, bits_code, width, nmant, digits = spec
    bits = struct.unpack(f"<{len(values)}{bits_code}", literal.data)
    out = []
    for v, raw in zip(values, bits, strict=True):
        if v != v:
            out.append(_nan_spelling(raw, bool(raw >> (width - 1)), True, nmant))
            continue
        text = f"{v:.{digits[0]}g}"
        for prec in digits[1:]:
            if not text[-1:].isdigit() or _reads_back(text, code, bits_code, raw):
                break
            text = f"{v:.{prec}g}"
        out.append(text)
    return out


def _reads_back(text: str, code: str, bits_code: str, raw: int) -> bool:
    """Whether `text` parses (through a double, as format_floats parses it) to the bits `raw`."""
    try:
        return struct.unpack(f"<{bits_code}", struct.pack(f"<{code}", float(text)))[0] == raw
    except OverflowError:  # beyond the type's range: NumPy's cast gives inf, not these bits
        return False


def format_scalar(value, ptype: P) -> str:
    """One element (a numpy or Python scalar of type ptype) in XLA's spelling."""
    import numpy as np

    arr = np.asarray(value, dtype=dtypes.to_numpy(ptype)).reshape(())
    return format_elements(arr, ptype)[0]


def format_elements(arr: np.ndarray, ptype: P) -> list[str]:
    """Every element of arr, row-major, as text."""
    import numpy as np

    flat = arr.reshape(-1)
    if ptype == P.PRED:
        if arr.ndim == 0:
            return ["true" if bool(flat[0]) else "false"]
        return ["1" if v else "0" for v in flat.tolist()]
    info = dtypes.info(ptype)
    if info.is_integral:
        return [str(v) for v in flat.tolist()]
    if info.is_complex:
        part = P.F32 if ptype == P.C64 else P.F64
        re_s = format_floats(np.ascontiguousarray(flat.real), part)
        im_s = format_floats(np.ascontiguousarray(flat.imag), part)
        return [f"({r}, {i})" for r, i in zip(re_s, im_s, strict=True)]
    return format_floats(flat, ptype)


def format_floats(flat: np.ndarray, ptype: P) -> list[str]:
    import numpy as np

    fmt = float_format_of(ptype)
    with np.errstate(all="ignore"):
        wide = flat.astype(np.float64)
    bits = flat.view(fmt.uint)
    out = [f"{v:.{fmt.digits[0]}g}" for v in wide.tolist()]
    for prec in fmt.digits[1:]:
        bad = _not_round_tripping(out, bits, fmt)
        if not bad:
            break
        for i in bad:
            out[i] = f"{wide[i]:.{prec}g}"
    for i in np.flatnonzero(np.isnan(wide)).tolist():
        out[i] = _nan_text(int(bits[i]), bool(np.signbit(wide[i])), fmt)
    return out


def _not_round_tripping(texts: list[str], bits: np.ndarray, fmt: FloatFormat) -> list[int]:
    import numpy as np

    with np.errstate(all="ignore"):
        back = np.array(texts, dtype=np.float64).astype(fmt.np_dtype).view(fmt.uint)
    wrong = back != bits
    finite = np.array([t[-1:].isdigit() for t in texts], dtype=bool)
    return np.flatnonzero(wrong & finite).tolist()


def _nan_text(raw: int, negative: bool, fmt: FloatFormat) -> str:
    return _nan_spelling(raw, negative, fmt.payload, fmt.nmant)


def _nan_spelling(raw: int, negative: bool, payload_bits: bool, nmant: int) -> str:
    text = "-nan" if negative else "nan"
    if payload_bits:
        payload = raw & ((1 << nmant) - 1)
        if payload != 1 << (nmant - 1):
            text += f"(0x{payload:x})"
    return text


def _nest(elems: list[str], dims: tuple[int, ...]) -> str:
    """XLA's one-line nesting of row-major element strings into braces."""
    rank = len(dims)
    if rank == 0:
        return elems[0]
    if rank == 1:
        return "{" + ", ".join(elems) + "}"
    pieces: list[str] = []
    _nest_level(elems, dims, 0, [], pieces, [0])
    return "".join(pieces)


def _nest_level(elems, dims, level, accum, out, cursor) -> None:
    rank, n = len(dims), dims[level]
    if level == rank - 1:
        pad = "" if n <= 1 else " "
        out.append("{" + pad + ", ".join(elems[cursor[0]:cursor[0] + n]) + pad + "}")
        cursor[0] += n
        return
    if rank > 3 and accum:
        out.append(f"{{ /*i{len(accum) - 1}={accum[-1]}*/" + (" " if n > 0 else ""))
    else:
        out.append("{ ")
    for i in range(n):
        if i:
            out.append(", ")
        accum.append(i)
        _nest_level(elems, dims, level + 1, accum, out, cursor)
        accum.pop()
    out.append(" }")
