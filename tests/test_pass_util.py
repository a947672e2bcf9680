"""Helpers shared by the pass tests: a small module builder, bit-exact comparison, running
passes with verification, and a FileCheck-style checker for golden text tests."""

from __future__ import annotations

import re

import numpy as np

from hloc.ir import Attrs, Computation, Instruction, Literal, Module, Opcode, Shape
from hloc.passes import PassRunner, parse_spec


class Builder:
    """Builds one computation: `b.param(shape)`, `b.op(Opcode.ADD, shape, x, y, **attrs)`."""

    def __init__(self, name: str = "main"):
        self.comp = Computation(name)
        self._params = 0

    def param(self, shape: Shape | str, name: str = "") -> Instruction:
        shape = parse_shape(shape)
        n = self._params
        self._params += 1
        return self.comp.create(Opcode.PARAMETER, shape, name=name or f"p{n}",
                                attrs=Attrs(parameter_number=n))

    def op(self, opcode: Opcode, shape: Shape | str, *operands: Instruction, called=(),
           name: str = "", **attrs) -> Instruction:
        return self.comp.create(opcode, parse_shape(shape), list(operands), called=called,
                                name=name, attrs=Attrs(**attrs))

    def const(self, value, dtype: str = "f32") -> Instruction:
        arr = np.asarray(value)
        from hloc.ir import dtypes

        et = dtypes.from_name(dtype)
        lit = Literal(Shape.array(et, arr.shape), arr.astype(dtypes.to_numpy(et)))
        return self.comp.create(Opcode.CONSTANT, lit.shape, attrs=Attrs(literal=lit))

    def splat(self, value, shape: Shape | str) -> Instruction:
        shape = parse_shape(shape)
        c = self.const(value, shape.dtype.name)
        return self.op(Opcode.BROADCAST, shape, c, dimensions=())

    def finish(self, root: Instruction) -> Computation:
        self.comp.root = root
        return self.comp


def parse_shape(shape: Shape | str) -> Shape:
    """'f32[2,3]' → Shape (row-major layout)."""
    if isinstance(shape, Shape):
        return shape
    m = re.fullmatch(r"(\w+)\[([\d,]*)\]", shape)
    assert m, shape
    dims = [int(d) for d in m.group(2).split(",") if d]
    return Shape.array(m.group(1), dims)


def module_of(entry: Computation, *callees: Computation, name: str = "m") -> Module:
    m = Module(name)
    for c in callees:
        m.add_computation(c)
    m.add_computation(entry, entry=True)
    return m


def reducer(opcode: Opcode, dtype: str = "f32", name: str = "") -> Computation:
    b = Builder(name or f"red_{opcode.value}")
    x, y = b.param(f"{dtype}[]"), b.param(f"{dtype}[]")
    return b.finish(b.op(opcode, f"{dtype}[]" if opcode != Opcode.COMPARE else "pred[]", x, y))


def run_passes(module: Module, spec: str) -> bool:
    """Run a pass spec with the verifier after every pass (the test configuration)."""
    return PassRunner(parse_spec(spec), verify=True).run(module)


def opcodes(comp: Computation) -> list[str]:
    return [i.opcode.value for i in comp.post_order()]


# ---- comparing results -----------------------------------------------------------------------
def bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape, dtype and bits, except that any NaN equals any NaN."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa = a.reshape(-1)
    fb = b.reshape(-1)
    if fa.dtype.kind in "fc" or fa.dtype.name in _ML_FLOATS:
        with np.errstate(invalid="ignore"):
            nan_a = np.isnan(fa.astype(np.complex128 if fa.dtype.kind == "c" else np.float64))
            nan_b = np.isnan(fb.astype(np.complex128 if fb.dtype.kind == "c" else np.float64))
        if not np.array_equal(nan_a, nan_b):
            return False
        fa, fb = fa[~nan_a], fb[~nan_b]
    raw_a = np.ascontiguousarray(fa).view(np.uint8)
    raw_b = np.ascontiguousarray(fb).view(np.uint8)
    return np.array_equal(raw_a, raw_b)


_ML_FLOATS = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e5m2fnuz",
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


def test_filecheck_itself():
    text = "a = add(x, y)\nb = mul(a, a)\nROOT c = neg(b)"
    filecheck(text, [("CHECK", "add("), ("CHECK-NEXT", "mul"), ("CHECK-NOT", "sub"),
                     ("CHECK", "ROOT {{\\w+}} = neg")])
    filecheck("ROOT %neg.1 = f32[] negate(%x.2)", [("CHECK", "ROOT %_ = f32[] negate(%_)")])
    filecheck(text, [("CHECK-DAG", "mul("), ("CHECK-DAG", "add("), ("CHECK", "neg")])
    for bad in ([("CHECK", "sub(")], [("CHECK", "mul"), ("CHECK-NEXT", "add")],
                [("CHECK-DAG", "add("), ("CHECK-DAG", "add("), ("CHECK", "neg")],
                [("CHECK-NOT", "mul"), ("CHECK", "neg")]):
        try:
            filecheck(text, bad)
        except AssertionError:
            continue
        raise AssertionError(f"{bad} should have failed")


def test_bits_equal_itself():
    assert bits_equal(np.array([np.nan, 1.0]), np.array([-np.nan, 1.0]))
    assert not bits_equal(np.array([0.0]), np.array([-0.0]))
    assert not bits_equal(np.array([1], np.int32), np.array([1], np.int64))
