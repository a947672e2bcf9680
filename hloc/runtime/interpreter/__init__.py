"""The NumPy reference interpreter: the oracle every backend is tested against.

`evaluate(module, args)` runs the entry computation with XLA semantics. Opcode implementations
live in the sibling modules, registered with `@impl(Opcode.X)` into registry.IMPLS (which
imports them on first use).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import InputError
from ...ir import Computation, Literal, Module, Opcode, Shape
from . import registry
from .registry import Context, Value


def evaluate_computation(comp: Computation, args: list[Value]) -> Value:
    """Evaluate one computation on argument values; returns the root's value."""
    values: dict[int, Value] = {}
    ctx = Context(evaluate_computation)
    for instr in comp.post_order():
        if instr.opcode == Opcode.PARAMETER:
            values[id(instr)] = args[instr.attrs.parameter_number]
            continue
        fn = registry.lookup(instr)
        operands = [values[id(o)] for o in instr.operands]
        values[id(instr)] = fn(ctx, instr, operands)
    return values[id(comp.root)]


def to_value(shape: Shape, data) -> Value:
    """Convert a Literal / ndarray / nested tuple into an interpreter value of `shape`."""
    if isinstance(data, Literal):
        if data.shape.is_tuple:
            return tuple(to_value(s, e) for s, e in zip(shape.tuple_shapes, data.elements, strict=True))
        data = data.array if data.shape.is_array else None
    if shape.is_tuple:
        return tuple(to_value(s, e) for s, e in zip(shape.tuple_shapes, data, strict=True))
    if not shape.is_array:
        return None
    arr = np.asarray(data)
    if arr.dtype != shape.np_dtype:
        arr = arr.astype(shape.np_dtype)
    return arr.reshape(shape.dims)


def to_literal(shape: Shape, value: Value) -> Literal:
    if shape.is_tuple:
        return Literal(shape, elements=tuple(to_literal(s, v) for s, v in zip(shape.tuple_shapes, value, strict=True)))
    if not shape.is_array:
        return Literal(shape)
    return Literal(shape, value)


def evaluate(module: Module, args: Sequence) -> Literal:
    """Run the module's entry computation on `args` (Literals or arrays, one per parameter)."""
    entry = module.entry
    params = entry.parameters
    if len(args) != len(params):
        raise InputError(f"module {module.name} takes {len(params)} arguments, got {len(args)}")
    values = [to_value(p.shape, a) for p, a in zip(params, args, strict=True)]
    result = evaluate_computation(entry, values)
    return to_literal(entry.result_shape, result)
