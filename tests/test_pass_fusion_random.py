"""Fusion on random graphs: any mix of elementwise ops, broadcasts, reductions, dots, shared
values and options must leave a valid module (verifier after each pass) computing bit-identical
results, with every fusion within its size limit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hloc.ir import DotDimensionNumbers, Opcode
from hloc.runtime.interpreter import evaluate

from .support.golden import random_value, results_equal
from .support.hlo import Builder, module_of, reducer, run_passes

pytestmark = pytest.mark.pure
Op = Opcode
SHAPES = {"m": "f32[4,6]", "r": "f32[4]", "c": "f32[6]", "s": "f32[]"}
UNARY = (Op.NEGATE, Op.ABS, Op.EXP, Op.TANH, Op.SIN, Op.FLOOR)
BINARY = (Op.ADD, Op.MULTIPLY, Op.MAXIMUM, Op.SUBTRACT, Op.DIVIDE)


class _Graph:
    """Random DAG over values of four shapes (matrix, row vector, column vector, scalar)."""

    def __init__(self, data):
        self.data = data
        self.b = Builder("main")
        self.adder = reducer(Op.ADD)
        self.values = {k: [self.b.param(s)] for k, s in SHAPES.items()}
        self.w = self.b.param("f32[6,6]")

    def pick(self, kind):
        return self.data.draw(st.sampled_from(self.values[kind]))

    def step(self) -> None:
        kind = self.data.draw(st.sampled_from(["m", "m", "m", "r", "c"]))
        choice = self.data.draw(st.integers(0, 5))
        new = [self._unary, self._binary, self._broadcast, self._reduce, self._dot,
               self._select][choice](kind)
        self.values[new[0]].append(new[1])

    def _unary(self, kind):
        return kind, self.b.op(self.data.draw(st.sampled_from(UNARY)), SHAPES[kind], self.pick(kind))

    def _binary(self, kind):
        op = self.data.draw(st.sampled_from(BINARY))
        return kind, self.b.op(op, SHAPES[kind], self.pick(kind), self.pick(kind))

    def _broadcast(self, kind):
        source = self.data.draw(st.sampled_from(["r", "c", "s"]))
        dims = {"r": (0,), "c": (1,), "s": ()}[source]
        return "m", self.b.op(Op.BROADCAST, SHAPES["m"], self.pick(source), dimensions=dims)

    def _reduce(self, kind):
        target = self.data.draw(st.sampled_from(["r", "c"]))
        zero = self.b.const(0.0)
        return target, self.b.op(Op.REDUCE, SHAPES[target], self.pick("m"), zero,
                                 called=[self.adder], dimensions=(1,) if target == "r" else (0,))

    def _dot(self, kind):
        return "m", self.b.op(Op.DOT, SHAPES["m"], self.pick("m"), self.w,
                              dot_dnums=DotDimensionNumbers((1,), (0,)))

    def _select(self, kind):
        a, c = self.pick(kind), self.pick(kind)
        p = self.b.op(Op.COMPARE, SHAPES[kind].replace("f32", "pred"), a, c,
                      comparison_direction="GT")
        return kind, self.b.op(Op.SELECT, SHAPES[kind], p, a, c)

    def module(self):
        outs = [v for vs in self.values.values() for v in vs[1:] if not v.users]
        outs = outs or [self.values["m"][-1]]
        root = self.b.op(Op.TUPLE, _tuple_shape(outs), *outs)
        return module_of(self.b.finish(root), self.adder)


def _tuple_shape(values):
    from hloc.ir import Shape

    return Shape.tuple_of(v.shape for v in values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_graphs_fuse_correctly(data):
    g = _Graph(data)
    for _ in range(data.draw(st.integers(3, 25))):
        g.step()
    module = g.module()
    rng = np.random.default_rng(1)
    args = [random_value(p.shape, rng) for p in module.entry.parameters]
    before = evaluate(module, args)
    max_ops = data.draw(st.sampled_from([2, 4, 16, 256]))
    options = f"max-ops={max_ops},duplicate={data.draw(st.sampled_from([0, 1, 4]))}," \
              f"output={data.draw(st.booleans())},reduce-epilogue={data.draw(st.booleans())}"
    multi = data.draw(st.booleans())
    run_passes(module, f"fusion{{{options}}}" + (",multi-output-fusion" if multi else ""))
    after = evaluate(module, args)
    assert results_equal(before, after)
    if not multi:
        for comp in module.computations:
            if comp.is_fusion:
                assert sum(i.opcode != Op.PARAMETER for i in comp.instructions) <= max_ops
