"""The opcode → lowering registry of the elemental emitter, with per-target overrides.

A lowering is `fn(ctx, instr, operand_generators) -> generator`; a generator maps a
multi-index (a list of i64 `ir.Value`s, one per dimension of the instruction's shape) to the
element's scalar value (or a tuple of values for tuple-shaped instructions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode

Index = list[ir.Value]
Generator = Callable[[Index], Any]
Lowering = Callable[[Any, Instruction, list[Generator]], Generator]

_LOWERINGS: dict[tuple[Opcode, str | None], Lowering] = {}


def emits(*opcodes: Opcode, target: str | None = None):
    """Register the decorated lowering for `opcodes` (for every target, or only `target`)."""

    def register(fn: Lowering) -> Lowering:
        for op in opcodes:
            key = (op, target)
            if key in _LOWERINGS:
                raise RuntimeError(f"duplicate lowering for {op.value} (target {target})")
            _LOWERINGS[key] = fn
        return fn

    return register


def generic_lowering(opcode: Opcode) -> Lowering | None:
    """The target-neutral lowering (what an override falls back to)."""
    return _LOWERINGS.get((opcode, None))


def lookup(instr: Instruction, target_kind: str) -> Lowering:
    fn = _LOWERINGS.get((instr.opcode, target_kind)) or _LOWERINGS.get((instr.opcode, None))
    if fn is None:
        raise UnsupportedError(f"the elemental emitter has no lowering for '{instr.opcode.value}' "
                               f"(instruction %{instr.name})")
    return fn


def supported_opcodes(target_kind: str | None = None) -> frozenset[Opcode]:
    return frozenset(op for op, t in _LOWERINGS if t is None or t == target_kind)
