"""Property test: random small elementwise expressions (rich in the special values the
simplifier's rules key on) evaluate bit-identically before and after simplification."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.ir import Opcode
from hloc.runtime.interpreter import evaluate

from .test_pass_util import Builder, module_of, results_equal, run_passes

pytestmark = pytest.mark.pure
N = 6  # elements per array
TYPES = ("f32", "s32", "u8", "pred")
SPECIAL = {
    "f32": [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, np.nan, np.inf, -np.inf, 3e38],
    "s32": [0, 1, -1, 2, 7, -(2**31), 2**31 - 1],
    "u8": [0, 1, 2, 255, 128],
    "pred": [False, True],
}
Op = Opcode
BINARY = {
    "f32": [Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.DIVIDE, Op.MAXIMUM, Op.MINIMUM, Op.POWER],
    "s32": [Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM, Op.AND, Op.OR, Op.XOR],
    "u8": [Op.ADD, Op.SUBTRACT, Op.MULTIPLY, Op.MAXIMUM, Op.MINIMUM, Op.AND, Op.OR, Op.XOR],
    "pred": [Op.AND, Op.OR, Op.XOR, Op.MAXIMUM, Op.MINIMUM, Op.MULTIPLY],
}
UNARY = {"f32": [Op.NEGATE], "s32": [Op.NEGATE, Op.NOT], "u8": [Op.NOT], "pred": [Op.NOT]}
DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


def leaf(dtype: str):
    """A parameter or a special-value constant (a splat or a constant array)."""
    return st.one_of(
        st.tuples(st.just("param"), st.just(dtype), st.integers(0, 1)),
        st.tuples(st.just("const"), st.just(dtype), st.sampled_from(SPECIAL[dtype]), st.booleans()))


def operand(dtype: str, depth: int):
    # Leaves twice as likely as subtrees: most rules key on a leaf operand.
    if depth <= 0:
        return leaf(dtype)
    return st.one_of(leaf(dtype), leaf(dtype), expr(dtype, depth))


@st.composite
def expr(draw, dtype: str, depth: int):
    """An expression tree as nested tuples; equal subtrees become one instruction."""
    kind = draw(st.sampled_from(["binary", "binary", "unary", "select", "compare", "convert",
                                 "same"]))
    sub = operand(dtype, depth - 1)
    if kind == "binary":
        return ("op", draw(st.sampled_from(BINARY[dtype])), dtype, draw(sub), draw(sub))
    if kind == "same":  # binary op on one operand twice: x - x, max(x, x), ...
        twice = draw(sub)
        return ("op", draw(st.sampled_from(BINARY[dtype])), dtype, twice, twice)
    if kind == "unary":
        return ("op", draw(st.sampled_from(UNARY[dtype])), dtype, draw(sub))
    if kind == "select":
        on_true = draw(sub)
        on_false = on_true if draw(st.integers(0, 3)) == 0 else draw(sub)
        return ("op", Op.SELECT, dtype, draw(operand("pred", depth - 1)), on_true, on_false)
    source = draw(st.sampled_from(TYPES))
    if kind == "compare":
        a = draw(operand(source, depth - 1))
        b = a if draw(st.booleans()) else draw(operand(source, depth - 1))
        return ("compare", draw(st.sampled_from(DIRECTIONS)), dtype, a, b) if dtype == "pred" \
            else ("op", Op.CONVERT, dtype, ("compare", "EQ", "pred", a, b))
    inner = draw(operand(dtype, depth - 1))
    via = ("op", Op.CONVERT, source, inner)
    return ("op", Op.CONVERT, dtype, via)


class _Emitter:
    def __init__(self):
        self.b = Builder()
        self.params = {t: [self.b.param(f"{t}[{N}]", f"{t}_{i}") for i in range(2)]
                       for t in TYPES}
        self.memo = {}

    def emit(self, node):
        key = repr(node)
        if key not in self.memo:
            self.memo[key] = self._emit(node)
        return self.memo[key]

    def _emit(self, node):
        tag = node[0]
        if tag == "param":
            return self.params[node[1]][node[2]]
        if tag == "const":
            _, dtype, value, as_array = node
            if as_array:
                return self.b.const(np.full(N, value), dtype)
            return self.b.splat(value, f"{dtype}[{N}]")
        if tag == "compare":
            _, direction, _, a, b = node
            return self.b.op(Op.COMPARE, f"pred[{N}]", self.emit(a), self.emit(b),
                             comparison_direction=direction)
        _, opcode, dtype, *operands = node
        return self.b.op(opcode, f"{dtype}[{N}]", *[self.emit(o) for o in operands])


def _inputs(draw_values):
    return [np.array(v, dtype=d) for v, d in draw_values]


@st.composite
def case(draw):
    dtype = draw(st.sampled_from(TYPES))
    tree = draw(expr(dtype, draw(st.integers(1, 4))))
    np_types = {"f32": np.float32, "s32": np.int32, "u8": np.uint8, "pred": np.bool_}
    args = []
    for t in TYPES:
        for _ in range(2):
            values = draw(st.lists(st.sampled_from(SPECIAL[t]), min_size=N, max_size=N))
            args.append(np.array(values).astype(np_types[t]))
    return tree, args


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_simplifier_preserves_bits(data):
    tree, args = data
    e = _Emitter()
    module = module_of(e.b.finish(e.emit(tree)))
    with np.errstate(all="ignore"):
        before = evaluate(module, args)
        run_passes(module, "simplify")
        after = evaluate(module, args)
    assert results_equal(before, after), module.entry.post_order()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_simplify_fold_cse_pipeline_preserves_bits(data):
    tree, args = data
    e = _Emitter()
    module = module_of(e.b.finish(e.emit(tree)))
    with np.errstate(all="ignore"):
        before = evaluate(module, args)
        run_passes(module, "fixpoint(simplify,fold,cse,dce)")
        after = evaluate(module, args)
    assert results_equal(before, after), module.entry.post_order()
