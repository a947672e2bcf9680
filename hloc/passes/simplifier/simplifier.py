"""The algebraic simplifier: local rewrite rules applied to a fixpoint by the shared driver.

The rules live in three tables (simplifier_rules_arith/shape/slicing.py); this module only joins
them into one and wraps the result as a pass.
"""

from __future__ import annotations

from ...ir import Module
from ...util.record import dataclass
from ..base import Pass, register_pass
from ..rewrite import RuleTable, rewrite_module
from .rules_arith import ARITH_RULES
from .rules_shape import SHAPE_RULES
from .rules_slicing import SLICING_RULES

SIMPLIFIER_RULES = RuleTable.merge("algebraic-simplifier", ARITH_RULES, SHAPE_RULES,
                                     SLICING_RULES)


@register_pass(aliases=("simplify",))
@dataclass
class AlgebraicSimplifier(Pass):
    """Applies local algebraic identities (x*1, reshape(reshape), slice(concat), ...) to a fixpoint.

    Assumes: a valid module. Guarantees: every rewrite is exact for all inputs: rules that
    would change results for NaN, inf or signed zeros do not fire (the one XLA-style exception,
    a reduce over size-1 dimensions with a ±0 sum init, may keep a -0.0), shapes and layouts of
    replaced instructions are unchanged, and side-effecting instructions are never touched.
    Copies with an unchanged layout are removed, so it belongs before copy insertion.
    """

    name = "algebraic-simplifier"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, SIMPLIFIER_RULES).changed


def rule_names() -> list[str]:
    """Every simplifier rule, in the order the driver tries them."""
    return [r.name for r in SIMPLIFIER_RULES.rules]
