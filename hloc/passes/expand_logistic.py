"""Logistic expansion: logistic(x) → 1 / (1 + exp(-x)), the form XLA CPU evaluates.

XLA's LogisticExpander writes the sigmoid with exp in the operand's own type, so each step rounds
to it (for f16, exp(-x) overflows and the result is 0 below x ≈ -11.1); backends then only need
exp, add and divide. Runs before float normalization, as in XLA.
"""

from __future__ import annotations

from ..ir import Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass
from .expand_builder import Emit
from .rewrite import P, RuleTable, rewrite_module

LOGISTIC_RULES = RuleTable("logistic-expander")
_b = Emit()


@LOGISTIC_RULES.rule(P(Opcode.LOGISTIC))
def expand_logistic(instr):
    """logistic(x) → 1 / (1 + exp(-x)) in x's type."""
    (x,) = instr.operands
    one = _b.full(1, x.shape.element_type, x.shape.dims)
    denominator = _b.add(one, _b.unary(Opcode.EXP, _b.unary(Opcode.NEGATE, x)))
    result = _b.div(one, denominator)
    result.shape = instr.shape
    return result


@register_pass
@dataclass
class LogisticExpander(Pass):
    """Rewrites every logistic into 1 / (1 + exp(-x)) (XLA's kExp expansion).

    Assumes: a valid module. Guarantees: no logistic remains; the expansion computes in the
    operand's type, as XLA CPU does, so values match XLA's (not a correctly rounded sigmoid).
    """

    name = "logistic-expander"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, LOGISTIC_RULES).changed
