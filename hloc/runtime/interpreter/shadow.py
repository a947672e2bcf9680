"""A module's f64 *shadow*: the same computation with every bf16, f16, f32 (and c64) value
carried in f64 (c128), so that the reference interpreter evaluates it almost exactly.

`hlo-run --reference` uses it to tell rounding from error: two correct f32 implementations
(the bundle and the NumPy interpreter) sum in different orders and differ by rounding, which a
long reduction with cancellation, or a recurrence that amplifies it, makes far larger than any
fixed tolerance. Measured against the shadow, the interpreter's own f32 error says how much
rounding this computation on these inputs produces, and the bundle's error can be judged
against that (tolerance.judge_rounding).

What changes: every leaf type in PROMOTED becomes its wider type (instructions, parameters,
computations' parameters, constants' values, exactly). What keeps its type: instructions
whose result depends on the bit pattern or on the storage type (KEEP: bitcast-convert,
custom-call, rng, stochastic-convert): their promoted operands are converted back to their
own types first and their result converted up after, so they compute what they computed.
A module where that cannot be done (a kept instruction with a tuple operand or result of
promoted types) raises ShadowUnavailable.
"""

from __future__ import annotations

from ...ir import Literal, Module, Opcode, Shape
from ...ir.dtypes import PrimitiveType as P

PROMOTED = {P.BF16: P.F64, P.F16: P.F64, P.F32: P.F64, P.C64: P.C128}
KEEP = frozenset({Opcode.BITCAST_CONVERT, Opcode.CUSTOM_CALL, Opcode.RNG,
                  Opcode.STOCHASTIC_CONVERT})


class ShadowUnavailable(Exception):
    """The module has an instruction the shadow cannot carry in f64 (the message says which)."""


def widened(shape: Shape) -> Shape:
    """`shape` with every PROMOTED leaf type widened."""
    if shape.is_tuple:
        return Shape.tuple_of(widened(s) for s in shape.tuple_shapes)
    if shape.is_array and shape.element_type in PROMOTED:
        return shape.with_type(PROMOTED[shape.element_type])
    return shape


def promotes(shape: Shape) -> bool:
    return widened(shape) != shape


def shadow_copy(module: Module) -> Module:
    """A copy of `module` (through its proto: `module` is left as it was) rewritten into its
    shadow; ShadowUnavailable as shadow_module."""
    from ...frontend import load_bytes, module_to_proto

    copy = load_bytes(module_to_proto(module).SerializeToString(deterministic=True),
                      f"{module.name} (f64 shadow)").module
    return shadow_module(copy)


def shadow_module(module: Module) -> Module:
    """Rewrite `module` (a copy the caller owns: it is changed in place) into its shadow and
    return it."""
    original = {id(i): i.shape for comp in module.computations for i in comp.instructions}
    for comp in module.computations:
        for instr in list(comp.instructions):
            if instr.opcode in KEEP:
                _keep(comp, instr, original)
            else:
                _widen(instr)
    return module


def _widen(instr) -> None:
    shape = widened(instr.shape)
    if shape == instr.shape:
        return
    if instr.opcode == Opcode.CONSTANT:
        instr.with_attrs(literal=_widened_literal(instr.literal, shape))
    instr.shape = shape


def _widened_literal(literal: Literal, shape: Shape) -> Literal:
    if shape.is_tuple:
        return Literal(shape, elements=tuple(_widened_literal(e, s) for e, s in
                                             zip(literal.elements, shape.tuple_shapes, strict=True)))
    if not shape.is_array:
        return literal
    return Literal(shape, literal.array.astype(shape.np_dtype))  # exact: every value fits


def _keep(comp, instr, original: dict) -> None:
    """Leave `instr` at its own types: convert its widened operands down, its result up."""
    for i, operand in enumerate(list(instr.operands)):
        own = original.get(id(operand), operand.shape)
        if not promotes(own):
            continue
        if not own.is_array:
            raise ShadowUnavailable(f"{instr.opcode.value} {instr.name} takes a tuple of "
                                    f"{own.to_text(False)}")
        instr.replace_operand(i, comp.create(Opcode.CONVERT, own, [operand],
                                             name=f"{operand.name}.narrow"))
    if not promotes(instr.shape):
        return
    if not instr.shape.is_array:
        raise ShadowUnavailable(f"{instr.opcode.value} {instr.name} returns a tuple of "
                                f"{instr.shape.to_text(False)}")
    users = list(instr.users)
    up = comp.create(Opcode.CONVERT, widened(instr.shape), [instr], name=f"{instr.name}.wide")
    for user in users:
        user.replace_operand_with(instr, up)
    if comp.root is instr:
        comp.root = up
