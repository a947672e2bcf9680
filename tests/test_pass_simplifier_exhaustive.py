"""Exhaustive check of the elementwise simplifier rules: every op applied to every pair of
special values (as parameters and as constants, in both operand positions) evaluates
bit-identically before and after `algebraic-simplifier` in the reference interpreter."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hloc.ir import Opcode, Shape
from hloc.runtime.interpreter import evaluate

from .support.golden import results_equal
from .support.hlo import Builder, module_of, run_passes
from .test_pass_simplifier_hypothesis import BINARY, DIRECTIONS, SPECIAL, TYPES, UNARY

pytestmark = pytest.mark.pure
Op = Opcode
NP = {"f32": np.float32, "s32": np.int32, "u8": np.uint8, "pred": np.bool_}


class Grid:
    """Two parameters that together hold every pair of special values of a type."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        values = np.array(SPECIAL[dtype]).astype(NP[dtype])
        self.n = len(values) ** 2
        self.shape = f"{dtype}[{self.n}]"
        self.args = [np.repeat(values, len(values)), np.tile(values, len(values))]
        self.b = Builder()
        self.p = [self.b.param(self.shape, "x"), self.b.param(self.shape, "y")]
        self.outputs = []

    def operands(self):
        """x, y and every special value as a broadcast constant and as a constant array."""
        yield from self.p
        for v in SPECIAL[self.dtype]:
            yield self.b.splat(v, self.shape)
            yield self.b.const(np.full(self.n, v), self.dtype)

    def check(self):
        root = self.b.op(Op.TUPLE, Shape.tuple_of(o.shape for o in self.outputs), *self.outputs)
        module = module_of(self.b.finish(root))
        with np.errstate(all="ignore"):
            before = evaluate(module, self.args)
            changed = run_passes(module, "simplify")
            after = evaluate(module, self.args)
        assert results_equal(before, after)
        return changed


@pytest.mark.parametrize("dtype,opcode", [(t, op) for t in TYPES for op in BINARY[t]])
def test_binary_op_rules(dtype, opcode):
    g = Grid(dtype)
    ops = list(g.operands())
    for a, b in itertools.product(ops, ops):
        g.outputs.append(g.b.op(opcode, g.shape, a, b))
    assert g.check()


@pytest.mark.parametrize("dtype", TYPES)
def test_unary_op_rules(dtype):
    g = Grid(dtype)
    for opcode in UNARY[dtype]:
        for x in g.operands():
            once = g.b.op(opcode, g.shape, x)
            g.outputs += [once, g.b.op(opcode, g.shape, once)]
    g.check()


@pytest.mark.parametrize("dtype", TYPES)
def test_select_rules(dtype):
    g = Grid(dtype)
    pred_shape = f"pred[{g.n}]"
    preds = [g.b.op(Op.COMPARE, pred_shape, *g.p, comparison_direction="LT"),
             g.b.splat(True, pred_shape), g.b.splat(False, pred_shape)]
    ops = list(g.operands())
    for p, a, b in itertools.product(preds, ops, ops):
        g.outputs.append(g.b.op(Op.SELECT, g.shape, p, a, b))
    g.check()


@pytest.mark.parametrize("dtype", TYPES)
def test_compare_rules(dtype):
    g = Grid(dtype)
    ops = list(g.operands())[:4]
    for direction, a, b in itertools.product(DIRECTIONS, ops, ops):
        g.outputs.append(g.b.op(Op.COMPARE, f"pred[{g.n}]", a, b, comparison_direction=direction))
    g.check()


MID_TYPES = ["pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
             "f64"]


@pytest.mark.parametrize("dtype", TYPES)
def test_convert_round_trips(dtype):
    g = Grid(dtype)
    for mid in MID_TYPES:
        for x in g.p:
            there = g.b.op(Op.CONVERT, f"{mid}[{g.n}]", x)
            g.outputs.append(g.b.op(Op.CONVERT, g.shape, there))
        g.outputs.append(g.b.op(Op.CONVERT, g.shape, g.p[0]))
    assert g.check()
