"""Golden text tests for the optimization passes (lit / FileCheck style).

Each tests/golden/passes/*.hlo file holds cases separated by `// -----`. A case is
    // RUN: <pass spec>
    // CHECK: <text>          (in order; {{regex}} holes)
    // CHECK-NEXT: <text>     (on the line right after the previous match)
    // CHECK-NOT: <text>      (not between the surrounding matches)
    // CHECK-DAG: <text>      (a run of these matches in any order)
    // NO-EVAL:               (skip the before/after evaluation)
    HloModule ...
`%_` in a check matches any instruction name. The module is parsed, the spec is run with the verifier after every pass, the printed result
must satisfy the checks, and the module must compute bit-identical results before and after
on random inputs in the reference interpreter.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from hloc.errors import UnsupportedError
from hloc.ir import Shape
from hloc.ir.parser import parse_module
from hloc.ir.printer import print_module
from hloc.runtime.interpreter import evaluate

from .test_pass_util import filecheck, results_equal, run_passes

pytestmark = pytest.mark.pure
GOLDEN = Path(__file__).parent / "golden" / "passes"
_DIRECTIVE = re.compile(r"^\s*//\s*(RUN|CHECK-NEXT|CHECK-NOT|CHECK-DAG|CHECK|NO-EVAL):\s?(.*)$")


def _cases():
    for path in sorted(GOLDEN.glob("*.hlo")):
        for n, chunk in enumerate(path.read_text().split("// -----")):
            if chunk.strip():
                yield pytest.param(chunk, id=f"{path.stem}-{n}")


def _parse_case(chunk: str):
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
    assert spec is not None, "case without // RUN:"
    return spec, checks, "\n".join(text), evaluate_it


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


@pytest.mark.parametrize("chunk", list(_cases()))
def test_golden(chunk):
    spec, checks, text, evaluate_it = _parse_case(chunk)
    module = parse_module(text)
    rng = np.random.default_rng(0)
    args = [random_value(p.shape, rng) for p in module.entry.parameters]
    before = None
    if evaluate_it:
        try:
            before = evaluate(module, args)
        except UnsupportedError:
            before = None
    run_passes(module, spec)
    printed = print_module(module)
    filecheck(printed, checks)
    if before is not None:
        after = evaluate(module, args)
        assert results_equal(before, after), printed


def test_golden_files_exist():
    assert len(list(_cases())) > 0
