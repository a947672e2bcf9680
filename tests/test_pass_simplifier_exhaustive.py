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


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64"])
def test_division_by_a_power_of_two_becomes_an_exact_multiply(dtype):
    """x / ±2^k → x * ±2^-k where both are normal numbers of the type, bit for bit over
    normal, subnormal, huge, infinite and NaN x; other divisors are left as they are."""
    import ml_dtypes

    np_type = np.dtype(ml_dtypes.bfloat16 if dtype == "bf16" else dtype.replace(
        "f", "float"))
    info = ml_dtypes.finfo(np_type)
    tiny, big = float(info.smallest_normal), float(info.max)
    rng = np.random.default_rng(0)
    x = np.concatenate([
        np.array([0.0, -0.0, 1.0, -3.5, tiny, -tiny, tiny / 4, big, -big, np.inf, -np.inf,
                  np.nan]),
        rng.standard_normal(64) * np.exp2(rng.integers(-12, 12, 64))]).astype(np_type)
    # tiny and 1/tiny: the extremes whose reciprocals are normal; tiny / 2 (subnormal) and
    # 2 / tiny (its reciprocal subnormal) are not rewritten.
    exact = [8.0, -4.0, 0.125, 2.0 ** -10, tiny, 1.0 / tiny]
    kept = [3.0, 0.1, tiny / 2, 2.0 / tiny]
    shape = f"{dtype}[{len(x)}]"
    b = Builder()
    p = b.param(shape, "x")
    outs = [b.op(Op.DIVIDE, shape, p, b.splat(c, shape)) for c in exact + kept]
    root = b.op(Op.TUPLE, Shape.tuple_of(o.shape for o in outs), *outs)
    module = module_of(b.finish(root))
    with np.errstate(all="ignore"):
        before = evaluate(module, [x])
        assert run_passes(module, "simplify")
        after = evaluate(module, [x])
    assert results_equal(before, after)
    ops = [o.opcode for o in module.entry.root.operands]
    assert ops == [Op.MULTIPLY] * len(exact) + [Op.DIVIDE] * len(kept)
