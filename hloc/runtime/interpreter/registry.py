"""The opcode → NumPy implementation registry of the reference interpreter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode

# A value is an np.ndarray for arrays, a tuple of values for tuples, None for tokens.
Value = Any
# impl(ctx, instr, operand_values) -> value
OpImpl = Callable[["Context", Instruction, list], Value]

_IMPLS: dict[Opcode, OpImpl] = {}


def impl(*opcodes: Opcode):
    """Register the decorated function as the implementation of `opcodes`."""

    def register(fn: OpImpl) -> OpImpl:
        for op in opcodes:
            if op in _IMPLS:
                raise RuntimeError(f"duplicate interpreter implementation for {op.value}")
            _IMPLS[op] = fn
        return fn

    return register


def lookup(instr: Instruction) -> OpImpl:
    fn = _IMPLS.get(instr.opcode)
    if fn is None:
        raise UnsupportedError(
            f"the reference interpreter does not support opcode '{instr.opcode.value}' "
            f"(instruction %{instr.name})")
    return fn


def supported_opcodes() -> frozenset[Opcode]:
    return frozenset(_IMPLS)


class Context:
    """Evaluation context handed to implementations: lets them call computations."""

    def __init__(self, evaluate_computation):
        self._evaluate = evaluate_computation

    def call(self, computation, args: list) -> Value:
        """Evaluate `computation` on argument values (used by reduce, sort, while, ...)."""
        return self._evaluate(computation, args)
