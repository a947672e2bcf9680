"""Tuple simplification: forward tuple elements through get-tuple-element and drop re-tupling."""

from __future__ import annotations

from ..ir import Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass
from .rewrite import P, RuleTable, rewrite_module

Op = Opcode
TUPLE_RULES = RuleTable("tuple-simplifier")


@TUPLE_RULES.rule(P(Op.GET_TUPLE_ELEMENT, P(Op.TUPLE)))
def gte_of_tuple(instr):
    """get-tuple-element(tuple(a0, a1, ...), i) → ai."""
    return instr.operands[0].operands[instr.attrs.tuple_index]


def _regathers_whole_tuple(instr) -> bool:
    ops = instr.operands
    if not ops or any(o.opcode != Op.GET_TUPLE_ELEMENT for o in ops):
        return False
    source = ops[0].operands[0]
    if len(source.shape.tuple_shapes) != len(ops):
        return False
    return all(o.operands[0] is source and o.attrs.tuple_index == i for i, o in enumerate(ops))


@TUPLE_RULES.rule(P(Op.TUPLE, where=_regathers_whole_tuple))
def tuple_of_all_elements(instr):
    """tuple(gte(x, 0), ..., gte(x, n-1)) → x when x has exactly those n elements."""
    return instr.operands[0].operands[0]


@register_pass
@dataclass
class TupleSimplifier(Pass):
    """Replaces get-tuple-element of a tuple instruction by the element and a tuple that
    re-gathers every element of another tuple (in order) by that tuple.

    Assumes: a valid module. Guarantees: only instructions with identical shapes (layouts
    included) are substituted; values are unchanged.
    """

    name = "tuple-simplifier"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, TUPLE_RULES).changed
