"""Golden tests for passes: FileCheck-style checks on printed HLO, bit-exact comparison of
results before and after, and the tests/golden/passes/*.hlo case files.

A case file holds cases separated by `// -----`. A case is
    // RUN: <pass spec>
    // CHECK: <text>          (in order; {{regex}} holes)
    // CHECK-NEXT: <text>     (on the line right after the previous match)
    // CHECK-NOT: <text>      (not between the surrounding matches)
    // CHECK-DAG: <text>      (a run of these matches in any order)
    // NO-EVAL:               (skip the before/after evaluation)
    HloModule ...
`%_` in a check matches any instruction name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hloc.errors import UnsupportedError
from hloc.ir import Literal, Shape
from hloc.ir.text.parser import parse_module
from hloc.ir.text.printer import print_module
from hloc.runtime.interpreter import evaluate

from .hlo import run_passes

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "passes"
_DIRECTIVE = re.compile(r"^\s*//\s*(RUN|CHECK-NEXT|CHECK-NOT|CHECK-DAG|CHECK|NO-EVAL):\s?(.*)$")


# ---- comparing results -----------------------------------------------------------------------
def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape, dtype and bits, except that any NaN equals any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa = a.reshape(-1)
    fb = b.reshape(-1)
    if fa.dtype.kind in "fc" or fa.dtype.name in ML_FLOATS:
        with np.errstate(invalid="ignore"):
            nan_a = np.isnan(fa.astype(np.complex128 if fa.dtype.kind == "c" else np.float64))
            nan_b = np.isnan(fb.astype(np.complex128 if fb.dtype.kind == "c" else np.float64))
        if not np.array_equal(nan_a, nan_b):
            return False
        fa, fb = fa[~nan_a], fb[~nan_b]
    raw_a = np.ascontiguousarray(fa).view(np.uint8)
    raw_b = np.ascontiguousarray(fb).view(np.uint8)
    return np.array_equal(raw_a, raw_b)


ML_FLOATS = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e5m2fnuz",
              "float8_e4m3fnuz", "float8_e4m3", "float8_e3m4", "float4_e2m1fn", "float8_e8m0fnu"}


def results_equal(before: Literal, after: Literal) -> bool:
    xs, ys = before.flatten(), after.flatten()
    return len(xs) == len(ys) and all(bits_equal(x, y) for x, y in zip(xs, ys, strict=True))


# ---- FileCheck-style checks ------------------------------------------------------------------
def _check_regex(pattern: str) -> re.Pattern:
    """Literal text with {{regex}} holes; `%_` stands for any instruction name (passes give
    new instructions fresh names)."""
    parts = re.split(r"\{\{(.*?)\}\}", pattern)
    rx = "".join(p if i % 2 else re.escape(p).replace("%_", r"%[\w.\-]+")
                 for i, p in enumerate(parts))
    return re.compile(rx)


def filecheck(text: str, checks: list[tuple[str, str]]) -> None:
    """Apply (kind, pattern) checks in order to `text`; kinds CHECK, CHECK-NEXT, CHECK-NOT and
    CHECK-DAG (a run of DAG checks matches distinct lines after the previous match, in any
    order). Raises AssertionError naming the first failing check."""
    lines = text.splitlines()
    pos = 0  # next line to search from
    pending_not: list[re.Pattern] = []
    dag_used: set[int] = set()
    dag_end = -1
    for kind, pattern in checks:
        rx = _check_regex(pattern)
        if kind != "CHECK-DAG" and dag_end >= 0:
            pos, dag_end, dag_used = dag_end + 1, -1, set()
        if kind == "CHECK-NOT":
            pending_not.append(rx)
            continue
        if kind == "CHECK-DAG":
            found = next((n for n in range(pos, len(lines))
                          if n not in dag_used and rx.search(lines[n])), None)
            assert found is not None, f"CHECK-DAG: {pattern!r} not found after line {pos}:\n{text}"
            dag_used.add(found)
            dag_end = max(dag_end, found)
            continue
        if kind == "CHECK-NEXT":
            found = pos if pos < len(lines) and rx.search(lines[pos]) else None
        else:
            found = next((n for n in range(pos, len(lines)) if rx.search(lines[n])), None)
        assert found is not None, f"{kind}: {pattern!r} not found after line {pos}:\n{text}"
        for nrx in pending_not:
            bad = [ln for ln in lines[pos:found] if nrx.search(ln)]
            assert not bad, f"CHECK-NOT: {nrx.pattern!r} matched {bad[0]!r}:\n{text}"
        pending_not = []
        pos = found + 1
    for nrx in pending_not:
        bad = [ln for ln in lines[pos:] if nrx.search(ln)]
        assert not bad, f"CHECK-NOT: {nrx.pattern!r} matched {bad[0]!r}:\n{text}"


def parse_checks(block: str) -> list[tuple[str, str]]:
    """'CHECK: x' / 'CHECK-NOT: y' lines → filecheck's (kind, pattern) list."""
    out = []
    for line in block.strip().splitlines():
        kind, _, pattern = line.strip().partition(": ")
        out.append((kind, pattern))
    return out


def golden(text: str, spec: str, checks: str = "", *, seed: int = 0, args=None,
           same=results_equal):
    """Run `spec` on the module in `text`; check the printed result and that values survive."""
    module = parse_module(text)
    rng = np.random.default_rng(seed)
    args = args if args is not None else [random_value(p.shape, rng)
                                          for p in module.entry.parameters]
    before = evaluate(module, args)
    run_passes(module, spec)
    printed = print_module(module)
    if checks:
        filecheck(printed, parse_checks(checks))
    after = evaluate(module, args)
    assert same(before, after), printed
    return module, printed


@dataclass(frozen=True)
class GoldenCase:
    """One `// -----` chunk of a golden file."""

    id: str  # "<file stem>-<index>"
    spec: str
    checks: list[tuple[str, str]]
    text: str
    evaluate: bool


def golden_cases() -> list[GoldenCase]:
    """Every case of tests/golden/passes/*.hlo, in file order."""
    out = []
    for path in sorted(GOLDEN.glob("*.hlo")):
        for n, chunk in enumerate(path.read_text().split("// -----")):
            if chunk.strip():
                out.append(parse_case(chunk, f"{path.stem}-{n}"))
    return out


def parse_case(chunk: str, case_id: str = "") -> GoldenCase:
    spec, checks, text, evaluate_it = None, [], [], True
    for line in chunk.splitlines():
        m = _DIRECTIVE.match(line)
        if m is None:
            if not line.lstrip().startswith("//"):
                text.append(line)
            continue
        kind, rest = m.group(1), m.group(2).strip()
        if kind == "RUN":
            spec = rest
        elif kind == "NO-EVAL":
            evaluate_it = False
        else:
            checks.append((kind, rest))
    assert spec is not None, f"{case_id}: case without // RUN:"
    return GoldenCase(case_id, spec, checks, "\n".join(text), evaluate_it)


def run_case(case: GoldenCase) -> None:
    """Parse, run the spec (verifier after every pass), apply the checks, and (unless
    NO-EVAL or the interpreter lacks an op) compare results before and after bit for bit."""
    module = parse_module(case.text)
    rng = np.random.default_rng(0)
    args = [random_value(p.shape, rng) for p in module.entry.parameters]
    before = None
    if case.evaluate:
        try:
            before = evaluate(module, args)
        except UnsupportedError:
            before = None
    run_passes(module, case.spec)
    printed = print_module(module)
    filecheck(printed, case.checks)
    if before is not None:
        assert results_equal(before, evaluate(module, args)), printed


def random_value(shape: Shape, rng: np.random.Generator):
    if shape.is_tuple:
        return tuple(random_value(s, rng) for s in shape.tuple_shapes)
    dtype = shape.np_dtype
    kind = shape.dtype.kind
    if kind == "pred":
        return rng.random(shape.dims) < 0.5
    if kind in ("int", "uint"):
        low = 0 if kind == "uint" else -9
        return rng.integers(low, 10, size=shape.dims).astype(dtype)
    values = rng.standard_normal(shape.dims) * 4
    return values.astype(dtype)
