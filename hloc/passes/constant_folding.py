"""Constant folding with the reference interpreter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UnsupportedError
from ..ir import Instruction, Literal, Module, Opcode
from ..util.log import get_logger
from ..util.record import dataclass
from .base import Pass, option, register_pass
from .rewrite import P, RuleTable, constant, has_side_effects, rewrite_module

if TYPE_CHECKING:
    pass

log = get_logger("hloc.passes.constant_folding")
Op = Opcode

# Never folded: control flow (the simplifiers handle constant predicates and trip counts),
# random numbers, tuples (a tuple of constants is already as simple as it gets) and opaque calls.
_NEVER = frozenset({
    Op.PARAMETER, Op.CONSTANT, Op.WHILE, Op.CONDITIONAL, Op.CUSTOM_CALL, Op.RNG, Op.RNG_BIT_GENERATOR,
    Op.RNG_GET_AND_UPDATE_STATE, Op.TUPLE, Op.AFTER_ALL, Op.ADD_DEPENDENCY, Op.OPT_BARRIER,
})


def evaluate_instruction(instr: Instruction) -> Literal:
    """Evaluate one instruction whose operands are constants with the reference interpreter."""
    import numpy as np

    from ..runtime.interpreter import evaluate_computation, to_literal, to_value
    from ..runtime.interpreter.registry import Context, lookup

    fn = lookup(instr)
    args = [to_value(o.shape, o.literal) for o in instr.operands]
    with np.errstate(all="ignore"):  # integer wrap-around and inf/NaN results are XLA semantics
        value = fn(Context(evaluate_computation), instr, args)
    return to_literal(instr.shape, value)


def _result_elements(instr: Instruction) -> int:
    return sum(s.num_elements for _, s in instr.shape.leaves())


def _foldable(instr: Instruction, max_elements: int) -> bool:
    if instr.opcode in _NEVER or not instr.operands or not instr.shape.is_array:
        return False
    if any(o.opcode != Op.CONSTANT for o in instr.operands):
        return False
    if _result_elements(instr) > max_elements or has_side_effects(instr):
        return False
    # A broadcast is cheaper to keep (and to emit) than the larger constant array it makes.
    return not (instr.opcode == Op.BROADCAST
                and instr.shape.num_elements > instr.operands[0].shape.num_elements)


def fold_table(max_elements: int) -> RuleTable:
    """A one-rule table folding any instruction whose operands are all constants."""
    table = RuleTable("constant-folding")

    @table.rule(P(None, where=lambda i: _foldable(i, max_elements)))
    def fold(instr):
        """op(constants...) → constant."""
        try:
            literal = evaluate_instruction(instr)
        except (UnsupportedError, NotImplementedError) as e:
            log.debug("not folding %%%s: %s", instr.name, e)
            return None
        except Exception:  # noqa: BLE001 - an interpreter gap must never fail a compile
            log.debug("not folding %%%s: the interpreter failed", instr.name, exc_info=True)
            return None
        return constant(literal)

    return table


@register_pass(aliases=("fold",))
@dataclass
class ConstantFolding(Pass):
    """Replaces instructions whose operands are all constants by the constant they compute.

    Assumes: a valid module. Guarantees: values are the reference interpreter's (XLA
    semantics); results with more than max_elements elements, size-increasing broadcasts, iota,
    tuples, control flow, random numbers and side-effecting ops are left alone; an op the
    interpreter cannot evaluate is skipped (debug log), never an error.
    """

    name = "constant-folding"
    max_elements: int = option(65536, minimum=0)

    def run(self, module: Module) -> bool:
        return rewrite_module(module, fold_table(self.max_elements)).changed
