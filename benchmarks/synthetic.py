"""Synthetic HLO modules of a chosen size for scaling benchmarks.

The module looks like a deep MLP-ish DAG: per block a dot, bias broadcast + add, an activation,
a row reduction feeding back through a broadcast, and some fan-out, so passes see realistic
mixes (elementwise chains, index ops, reductions, constants) rather than one long add chain.
"""

from __future__ import annotations

import numpy as np

from hloc.ir import (
    Attrs,
    Computation,
    DotDimensionNumbers,
    Literal,
    Module,
    Opcode,
    Shape,
)


def _adder(module: Module) -> Computation:
    comp = Computation("add_f32")
    a = comp.create(Opcode.PARAMETER, Shape.scalar("f32"), name="a", attrs=Attrs(parameter_number=0))
    b = comp.create(Opcode.PARAMETER, Shape.scalar("f32"), name="b", attrs=Attrs(parameter_number=1))
    comp.root = comp.create(Opcode.ADD, Shape.scalar("f32"), [a, b], name="sum")
    module.add_computation(comp)
    return comp


def build(num_instructions: int, width: int = 16) -> Module:
    """A module with about `num_instructions` instructions in its entry computation."""
    m = Module(f"synthetic_{num_instructions}")
    add = _adder(m)
    entry = Computation("main")
    mat = Shape.array("f32", [width, width])
    vec = Shape.array("f32", [width])
    x = entry.create(Opcode.PARAMETER, mat, name="x", attrs=Attrs(parameter_number=0))
    w = entry.create(Opcode.PARAMETER, mat, name="w", attrs=Attrs(parameter_number=1))
    zero = entry.create(Opcode.CONSTANT, Shape.scalar("f32"), name="zero",
                        attrs=Attrs(literal=Literal.scalar(0.0, "f32")))
    dnums = DotDimensionNumbers((1,), (0,))
    h = x
    block = 0
    while len(entry.instructions) < num_instructions - 12:
        block += 1
        d = entry.create(Opcode.DOT, mat, [h, w], attrs=Attrs(dot_dnums=dnums))
        bias = entry.create(Opcode.CONSTANT, vec, attrs=Attrs(literal=Literal.from_array(
            np.full(width, 0.01 * (block % 7), np.float32))))
        bb = entry.create(Opcode.BROADCAST, mat, [bias], attrs=Attrs(dimensions=(1,)))
        s = entry.create(Opcode.ADD, mat, [d, bb])
        z = entry.create(Opcode.BROADCAST, mat, [zero], attrs=Attrs(dimensions=()))
        r = entry.create(Opcode.MAXIMUM, mat, [s, z])
        red = entry.create(Opcode.REDUCE, vec, [r, zero], called=[add], attrs=Attrs(dimensions=(1,)))
        rb = entry.create(Opcode.BROADCAST, mat, [red], attrs=Attrs(dimensions=(0,)))
        t = entry.create(Opcode.TANH, mat, [rb])
        mul = entry.create(Opcode.MULTIPLY, mat, [r, t])
        tr = entry.create(Opcode.TRANSPOSE, mat, [mul], attrs=Attrs(dimensions=(1, 0)))
        h = entry.create(Opcode.ADD, mat, [tr, h])
    entry.root = entry.create(Opcode.TUPLE, Shape.tuple_of([mat]), [h])
    m.add_computation(entry, entry=True)
    return m
