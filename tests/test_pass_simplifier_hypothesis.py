"""Property test: random small elementwise expressions (rich in the special values the
simplifier's rules key on) evaluate bit-identically before and after simplification."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.ir import Opcode, Shape
from hloc.runtime.interpreter import evaluate

from .support.golden import results_equal
from .support.hlo import Builder, module_of, run_passes

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


# The identities and absorbing values the rules key on, drawn more often than other constants.
KEY_VALUES = {"f32": [0.0, -0.0, 1.0], "s32": [0, 1, -1], "u8": [0, 1, 255],
              "pred": [False, True]}


@functools.cache
def choice(values: tuple):
    return st.sampled_from(values)


# Strategies are built once per (dtype, depth) and reused: building them anew inside every draw
# cost hypothesis most of this file's time (validating fresh strategy objects), for the same
# distribution of cases.
@functools.cache
def leaf(dtype: str):
    """A parameter or a special-value constant (a splat or a constant array)."""
    value = st.one_of(choice(tuple(KEY_VALUES[dtype])), choice(tuple(SPECIAL[dtype])))
    return st.one_of(
        st.tuples(st.just("param"), st.just(dtype), st.integers(0, 1)),
        st.tuples(st.just("const"), st.just(dtype), value, st.booleans()))


@functools.cache
def operand(dtype: str, depth: int):
    # Leaves twice as likely as subtrees: most rules key on a leaf operand.
    if depth <= 0:
        return leaf(dtype)
    return st.one_of(leaf(dtype), leaf(dtype), expr(dtype, depth))


KINDS = ("binary", "binary", "unary", "select", "compare", "convert", "same")


@functools.cache
def expr(dtype: str, depth: int):
    return _expr(dtype, depth)


@st.composite
def _expr(draw, dtype: str, depth: int):
    """An expression tree as nested tuples; equal subtrees become one instruction."""
    kind = draw(choice(KINDS))
    sub = operand(dtype, depth - 1)
    if kind == "binary":
        return ("op", draw(choice(tuple(BINARY[dtype]))), dtype, draw(sub), draw(sub))
    if kind == "same":  # binary op on one operand twice: x - x, max(x, x), ...
        twice = draw(sub)
        return ("op", draw(choice(tuple(BINARY[dtype]))), dtype, twice, twice)
    if kind == "unary":
        return ("op", draw(choice(tuple(UNARY[dtype]))), dtype, draw(sub))
    if kind == "select":
        on_true = draw(sub)
        on_false = on_true if draw(st.integers(0, 3)) == 0 else draw(sub)
        return ("op", Op.SELECT, dtype, draw(operand("pred", depth - 1)), on_true, on_false)
    source = draw(choice(TYPES))
    if kind == "compare":
        a = draw(operand(source, depth - 1))
        b = a if draw(st.booleans()) else draw(operand(source, depth - 1))
        return ("compare", draw(choice(tuple(DIRECTIONS))), dtype, a, b) if dtype == "pred" \
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


@functools.cache
def values_of(dtype: str):
    return st.lists(choice(tuple(SPECIAL[dtype])), min_size=N, max_size=N)


TREES = 8  # independent expressions per module: more coverage per example at little cost


@st.composite
def case(draw):
    trees = []
    for _ in range(TREES):
        dtype = draw(choice(TYPES))
        trees.append(draw(expr(dtype, draw(st.integers(1, 4)))))
    np_types = {"f32": np.float32, "s32": np.int32, "u8": np.uint8, "pred": np.bool_}
    args = []
    for t in TYPES:
        for _ in range(2):
            values = draw(values_of(t))
            args.append(np.array(values).astype(np_types[t]))
    return trees, args


def build(trees):
    e = _Emitter()
    outputs = [e.emit(t) for t in trees]
    root = e.b.op(Op.TUPLE, Shape.tuple_of(o.shape for o in outputs), *outputs)
    return module_of(e.b.finish(root))


def check(data, spec: str) -> None:
    trees, args = data
    module = build(trees)
    with np.errstate(all="ignore"):
        before = evaluate(module, args)
        run_passes(module, spec)
        after = evaluate(module, args)
    assert results_equal(before, after), trees


# Hypothesis draws new cases on every run: `make test` checks 100 per run, `make test-all` 300
# more (test_simplifier_preserves_bits_more), the same check on the same strategy.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_simplifier_preserves_bits(data):
    check(data, "simplify")


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_simplifier_preserves_bits_more(data):
    check(data, "simplify")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
def test_simplify_fold_cse_pipeline_preserves_bits(data):
    check(data, "fixpoint(simplify,fold,cse,dce)")
