"""Comparing result arrays against expected ones, and summarizing arrays for people.

Split out of `io.py` (which re-exports everything here) to keep files small. Rules:
floats (and complex) pass where |a - e| <= atol + rtol * |e| (numpy's isclose), NaN must meet
NaN and an infinity the same infinity; integers and predicates must be equal; a type or shape
difference fails the output outright. Errors are computed in float64 / complex128. The max
relative error is taken over elements whose expected value is finite and non-zero; NaN/Inf
mismatches are counted but excluded from the max errors (they are named in the note).
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np

from ..ir import dtypes
from ..util.record import dataclass

# dtype name -> (rtol, atol) used when the caller gives none. Wide enough for differences in
# transcendental approximations and summation order, a few ulps for the narrow types.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "f64": (1e-9, 1e-12),
    "c128": (1e-9, 1e-12),
    "f32": (1e-4, 1e-5),
    "c64": (1e-4, 1e-5),
    "f16": (1e-2, 1e-3),
    "bf16": (2e-2, 1e-2),
}
for _d in dtypes._TABLE:
    if _d.kind == "float" and _d.name not in DEFAULT_TOLERANCES:
        _eps = float(ml_dtypes.finfo(_d.np_dtype).eps)
        DEFAULT_TOLERANCES[_d.name] = (2 * _eps, 2 * _eps)


@dataclass(frozen=True)
class OutputCheck:
    """The comparison of one output: errors, mismatch count and the first mismatch."""

    index: int
    type_text: str  # e.g. "f32[4,3]"
    size: int
    ok: bool
    mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    first_mismatch: tuple[int, ...] | None = None
    first_values: str = ""  # "actual vs expected" at first_mismatch
    rtol: float = 0.0
    atol: float = 0.0
    note: str = ""


@dataclass(frozen=True)
class Report:
    """All outputs' checks; `ok` when every output matches, `format()` is a text table."""

    checks: tuple[OutputCheck, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def format(self) -> str:
        header = ("output", "type", "max abs err", "max rel err", "mismatches", "status")
        rows = [header] + [_row(c) for c in self.checks]
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
                 for r in rows]
        failed = sum(not c.ok for c in self.checks)
        lines.append(f"{'OK' if not failed else 'FAIL'}: {len(self.checks) - failed} of "
                     f"{len(self.checks)} output(s) match")
        return "\n".join(lines)


def _row(c: OutputCheck) -> tuple[str, ...]:
    status = "ok" if c.ok else "MISMATCH"
    if c.first_mismatch is not None:
        status += f" at {list(c.first_mismatch)}: {c.first_values}"
    if c.note:
        status += f" ({c.note})"
    return (f"out{c.index}", c.type_text, f"{c.max_abs:.3e}", f"{c.max_rel:.3e}",
            f"{c.mismatches} / {c.size}", status)


def describe(arr: np.ndarray) -> str:
    """HLO-style type text of an array, e.g. f32[3,4] (numpy's name if XLA has none)."""
    return f"{_type_name(arr.dtype)}[{','.join(map(str, arr.shape))}]"


def _type_name(dt: np.dtype) -> str:
    try:
        return dtypes.name(dtypes.from_numpy(dt.newbyteorder("=")))
    except ValueError:
        return str(dt)


def narrow_float_type(module) -> str | None:
    """The float type under 32 bits with the widest default tolerance that some instruction
    of `module` (an ir.Module) produces, or None. A module that rounds to bf16 on the way
    (mixed precision: bf16 layers with f32 results) has f32 outputs that another compiler's
    agree with only to bf16 steps: one f32 ulp of a sum flips a bf16 rounding."""
    found = {dtypes.name(shape.element_type)
             for comp in module.computations for instr in comp.instructions
             for _, shape in instr.shape.leaves()
             if shape.is_array and dtypes.info(shape.element_type).kind == "float"
             and dtypes.info(shape.element_type).bits < 32}
    return max(found, key=lambda name: DEFAULT_TOLERANCES[name], default=None)


def compare_arrays(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], *,
                   rtol: float | None = None, atol: float | None = None,
                   computed_in: str | None = None) -> Report:
    """Compare two equally long lists of arrays output by output. `computed_in`: a narrow float
    type the module computes in (narrow_float_type), whose default tolerances, where wider,
    replace those of wider float outputs when neither tolerance is given."""
    if len(actual) != len(expected):
        raise ValueError(f"{len(actual)} actual outputs but {len(expected)} expected")
    checks = (_check(i, np.asarray(a), np.asarray(e), rtol, atol, computed_in)
              for i, (a, e) in enumerate(zip(actual, expected, strict=True)))
    return Report(tuple(checks))


def _check(index: int, a: np.ndarray, e: np.ndarray, rtol: float | None,
           atol: float | None, computed_in: str | None = None) -> OutputCheck:
    text = describe(a)
    if a.dtype != e.dtype or a.shape != e.shape:
        return OutputCheck(index, text, a.size, ok=False, note=f"expected {describe(e)}")
    note = ""
    if _kind(a.dtype) in ("float", "complex"):
        default = DEFAULT_TOLERANCES.get(_type_name(a.dtype), (1e-4, 1e-5))
        narrow = DEFAULT_TOLERANCES.get(computed_in or "", default)
        if rtol is None and atol is None and narrow > default and _kind(a.dtype) == "float":
            default, note = narrow, f"{computed_in} tolerances: computed in {computed_in}"
        rtol = default[0] if rtol is None else rtol
        atol = default[1] if atol is None else atol
        bad, diff, finite = _float_mismatch(a, e, rtol, atol)
    else:
        rtol = atol = 0.0
        bad = a != e
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        finite = np.ones(a.shape, bool)
    e_abs = np.abs(_wide(e))
    return _summarize_check(index, text, a, e, bad, diff, finite, e_abs, rtol, atol, note)


def without_finite_values(arrays: Sequence[np.ndarray]) -> list[int]:
    """Indices of the non-empty float/complex arrays holding no finite value (NaN/Inf only):
    a comparison of them checks nothing."""
    return [i for i, x in enumerate(map(np.asarray, arrays))
            if x.size and _kind(x.dtype) in ("float", "complex") and not np.isfinite(_wide(x)).any()]


def _kind(dt: np.dtype) -> str:
    """"pred", "int", "uint", "float" or "complex" (numpy's view for types XLA lacks)."""
    try:
        return dtypes.info(dtypes.from_numpy(dt.newbyteorder("="))).kind
    except ValueError:
        return {"b": "pred", "i": "int", "u": "uint", "c": "complex"}.get(dt.kind, "float")


def _wide(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # signaling NaNs warn when widened; they stay NaN
        return x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)


def _float_mismatch(a: np.ndarray, e: np.ndarray, rtol: float, atol: float):
    """(bad mask, |a-e|, both-finite mask) under the isclose rule with NaN/Inf matching."""
    a64, e64 = _wide(a), _wide(e)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a64 - e64)
    finite = np.isfinite(a64) & np.isfinite(e64)
    diff = np.where(finite, diff, 0.0)
    close = finite & (diff <= atol + rtol * np.abs(np.where(finite, e64, 0)))
    both_nan = np.isnan(a64) & np.isnan(e64)
    same_inf = ~finite & ~np.isnan(a64) & ~np.isnan(e64) & (a64 == e64)
    return ~(close | both_nan | same_inf), diff, finite


def _summarize_check(index, text, a, e, bad, diff, finite, e_abs, rtol, atol,
                     tolerance_note: str = "") -> OutputCheck:
    count = int(np.count_nonzero(bad))
    max_abs = float(diff[finite].max()) if finite.any() else 0.0
    rel_mask = finite & (e_abs != 0)
    max_rel = float((diff[rel_mask] / e_abs[rel_mask]).max()) if rel_mask.any() else 0.0
    first, values, note = None, "", ""
    if count:
        first = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(bad)[0]), a.shape))
        values = f"{_fmt(a[first], a.dtype)} vs {_fmt(e[first], e.dtype)}"
        nonfinite = int(np.count_nonzero(bad & ~finite))
        note = f"{nonfinite} NaN/Inf mismatch(es)" if nonfinite else ""
    note = "; ".join(n for n in (tolerance_note, note) if n)
    return OutputCheck(index, text, int(a.size), count == 0, count, max_abs, max_rel, first,
                       values, float(rtol), float(atol), note)


def _fmt(x, dt: np.dtype) -> str:
    kind = _kind(dt)
    if kind == "pred":
        return "true" if x else "false"
    if kind == "complex":
        return f"{complex(x):.6g}"
    if kind in ("int", "uint"):
        return str(int(x))
    return f"{float(x):.6g}"


def summarize(arrays: Sequence[np.ndarray], *, first: int = 6) -> str:
    """One line per output: name, type, statistics and the first few values."""
    return "\n".join(_summary_line(i, np.asarray(a), first) for i, a in enumerate(arrays))


def _summary_line(index: int, arr: np.ndarray, first: int) -> str:
    head = f"out{index}  {describe(arr)}"
    if arr.size == 0:
        return f"{head}  (empty)"
    flat = arr.reshape(-1)
    values = ", ".join(_fmt(x, arr.dtype) for x in flat[:first]) + (", ..." if arr.size > first else "")
    return f"{head}  {_stats(arr)}  [{values}]"


def _stats(arr: np.ndarray) -> str:
    if arr.dtype == np.bool_:
        return f"true={int(np.count_nonzero(arr))}/{arr.size}"
    wide = _wide(arr)
    if wide.dtype.kind == "c":
        return f"mean={complex(wide.mean()):.4g} max|x|={float(np.abs(wide).max()):.4g}"
    finite = wide[np.isfinite(wide)]
    nonfinite = arr.size - finite.size
    extra = f" nan/inf={nonfinite}" if nonfinite else ""
    if finite.size == 0:
        return "no finite values" + extra
    return (f"min={finite.min():.4g} max={finite.max():.4g} mean={finite.mean():.4g}" + extra)


# How much more rounding than the f32 reference's own a result may carry against the f64
# shadow (judge_rounding). Two sound f32 implementations of a reduction err by the same order
# (each within a few units of eps * sum |terms|): over the benchmark cases and models with
# random inputs the bundle's worst error against the shadow was 0.13-1.6x the reference's.
ROUNDING_FACTOR = 4.0
# A reference error beyond this fraction of an output's largest value marks the output
# ill-conditioned for these inputs: rounding alone changes it visibly.
ILL_CONDITIONED = 1e-2


def judge_rounding(actual: Sequence[np.ndarray], reference: Sequence[np.ndarray],
                   exact: Sequence[np.ndarray], strict: Report) -> tuple[Report, list[str]]:
    """Re-judge the outputs that failed `strict` (a comparison with the reference interpreter)
    against `exact`, the module's f64 shadow (interpreter/shadow.py) on the same interpreter:
    an element passes where it is within the strict tolerance of the exact value plus
    ROUNDING_FACTOR times the largest error the reference itself makes in that output, or
    where it matched the reference. Sound only for the interpreter: its f32 and f64 runs share
    every operation, so their difference is rounding alone; another implementation's results
    (an --expected file) may be wrong, and a wrong file would widen its own allowance.
    Returns the new report and warnings for ill-conditioned outputs."""
    checks, warnings = [], []
    for c in strict.checks:
        i = c.index
        a, r, x = np.asarray(actual[i]), np.asarray(reference[i]), np.asarray(exact[i])
        if (c.ok or a.dtype != r.dtype or a.shape != r.shape or x.shape != a.shape
                or _kind(a.dtype) not in ("float", "complex")):
            checks.append(c)
            continue
        r64, x64 = _wide(r), _wide(x)
        finite = np.isfinite(r64) & np.isfinite(x64)
        with np.errstate(invalid="ignore", over="ignore"):
            noise = float(np.abs(r64 - x64)[finite].max()) if finite.any() else 0.0
        atol = c.atol + ROUNDING_FACTOR * noise
        bad, diff, finite_ax = _float_mismatch(a, x64, c.rtol, atol)
        bad &= _float_mismatch(a, r, c.rtol, c.atol)[0]  # NaN/Inf as the reference has them
        scale = float(np.abs(x64[finite]).max()) if finite.any() else 0.0
        note = (f"vs f64: the reference's own rounding error is up to {noise:.3g}, "
                f"{ROUNDING_FACTOR:g}x that allowed; {c.mismatches} differ from the reference")
        if noise > ILL_CONDITIONED * scale:
            warnings.append(f"out{i} is ill-conditioned for these inputs: rounding alone moves it "
                            f"by up to {noise:.3g} (its values reach {scale:.3g}); a comparison "
                            "at f32 precision says little about it")
            note += "; ill-conditioned"
        checks.append(_summarize_check(i, c.type_text, a, x64.astype(a.dtype), bad, diff,
                                       finite_ax, np.abs(x64), c.rtol, atol, note))
    return Report(tuple(checks)), warnings
