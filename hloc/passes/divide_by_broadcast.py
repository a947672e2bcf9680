"""Division by a broadcast becomes multiplication by the broadcast reciprocal, as XLA CPU does.

XLA CPU (jax 0.10.2) rewrites a float `a / broadcast(b)`, where the broadcast repeats b's
elements, into `a * broadcast(1 / b)`: one division per element of b instead of one per
element of the result. Every softmax's `exp(x - max) / sum` and every per-row scale (`x /
scale[:, None]`) is computed that way, and the product differs from the quotient in the last
bit for about a quarter of the elements, which a `round` after it (int8 quantization) turns
into a whole step.

Probed against jax 0.10.2 on CPU: f16, f32 and f64 divisions are rewritten, with the
reciprocal rounded to the element type; bf16 ones run in f32 (float normalization) and
match either form; complex divisions, a constant dividend, and a broadcast that repeats
nothing (`[n] -> [n, 1]`) are left alone. Like divide-by-constant, this is not an exact
rewrite, so it is not one of the algebraic simplifier's rules; it runs where that pass runs.
"""

from __future__ import annotations

import math

from ..ir import Instruction, Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass
from .divide_by_constant import WIDE
from .expand_builder import Emit
from .rewrite import P, RuleTable, rewrite_module

Op = Opcode
_b = Emit()
BROADCAST_DIVIDE_RULES = RuleTable("divide-by-broadcast")


def _is_constant(x: Instruction) -> bool:
    return x.opcode == Op.CONSTANT or (x.opcode == Op.BROADCAST
                                       and x.operands[0].opcode == Op.CONSTANT)


def _applies(instr: Instruction) -> bool:
    if not instr.shape.is_array or not instr.shape.dtype.is_float:
        return False
    a, b = instr.operands
    return (b.opcode == Op.BROADCAST and not _is_constant(b) and not _is_constant(a)
            and math.prod(b.operands[0].shape.dims) < instr.shape.num_elements)


@BROADCAST_DIVIDE_RULES.rule(P(Op.DIVIDE, where=_applies))
def broadcast_reciprocal(instr):
    """a / broadcast(b) → a * broadcast(1 / b), in the type the division runs in."""
    a, b = instr.operands
    ptype = instr.shape.element_type
    wide = WIDE.get(ptype, ptype)
    divisor = _b.convert(b.operands[0], wide)
    inverse = _b.div(_b.full(1, wide, divisor.shape.dims), divisor)
    spread = _b.bcast(inverse, instr.shape.dims, b.attrs.dimensions or ())
    result = _b.convert(_b.mul(_b.convert(a, wide), spread), ptype)
    result.shape = instr.shape
    return result


@register_pass
@dataclass
class DivideByBroadcast(Pass):
    """Rewrites a / broadcast(b) into a * broadcast(1/b), as XLA CPU does.

    Assumes: a valid module. Guarantees: every float (not complex) divide whose dividend is
    neither a constant nor a broadcast of one, and whose divisor is a broadcast of a
    non-constant with fewer elements than the result, becomes a multiply by the broadcast
    reciprocal, computed in the type the division runs in (f32 for bf16, f16 for f8, with
    converts around it), so values equal XLA CPU's.
    """

    name = "divide-by-broadcast"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, BROADCAST_DIVIDE_RULES).changed
