"""The opcode → NumPy implementation registry of the reference interpreter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode
from ...registry import Registry

# A value is an np.ndarray for arrays, a tuple of values for tuples, None for tokens.
Value = Any
# impl(ctx, instr, operand_values) -> value
OpImpl = Callable[["Context", Instruction, list], Value]

# The sibling modules that register implementations, imported on the first lookup.
IMPLS: Registry[Opcode, OpImpl] = Registry("interpreter implementation", modules=tuple(
    f"hloc.runtime.interpreter.{name}" for name in (
        "basic", "batchnorm", "bitops", "collectives", "compare", "contract", "control", "convert",
        "elementwise", "gather_scatter", "mathops", "reduce", "rng", "shape_ops", "sort")))
# Decorator: `@impl(Opcode.X, ...)` registers the implementation of those opcodes.
impl = IMPLS.register


def lookup(instr: Instruction) -> OpImpl:
    fn = IMPLS.get(instr.opcode)
    if fn is None:
        raise UnsupportedError(
            f"the reference interpreter does not support opcode '{instr.opcode.value}' "
            f"(instruction %{instr.name})")
    return fn


def supported_opcodes() -> frozenset[Opcode]:
    return IMPLS.keys()


class Context:
    """Evaluation context handed to implementations: lets them call computations."""

    def __init__(self, evaluate_computation):
        self._evaluate = evaluate_computation

    def call(self, computation, args: list) -> Value:
        """Evaluate `computation` on argument values (used by reduce, sort, while, ...)."""
        return self._evaluate(computation, args)
