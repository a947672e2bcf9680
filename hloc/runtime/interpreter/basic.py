"""Structural opcodes: constant, tuple, get-tuple-element, call, barriers, tokens."""

from __future__ import annotations

from ...ir import Opcode
from .registry import impl


@impl(Opcode.CONSTANT)
def constant(ctx, instr, ops):
    from . import to_value

    return to_value(instr.shape, instr.attrs.literal)


@impl(Opcode.TUPLE)
def tuple_(ctx, instr, ops):
    return tuple(ops)


@impl(Opcode.GET_TUPLE_ELEMENT)
def get_tuple_element(ctx, instr, ops):
    return ops[0][instr.attrs.tuple_index]


@impl(Opcode.CALL)
def call(ctx, instr, ops):
    return ctx.call(instr.called[0], ops)


@impl(Opcode.OPT_BARRIER)
def opt_barrier(ctx, instr, ops):
    return ops[0]


@impl(Opcode.AFTER_ALL, Opcode.ADD_DEPENDENCY)
def token_ops(ctx, instr, ops):
    return ops[0] if instr.opcode == Opcode.ADD_DEPENDENCY else None
