"""Comparison expansion: TOTALORDER float compares become signed-integer compares of keys.

A float's bits, read as a signed integer, order non-negative floats correctly; flipping every
non-sign bit of the negative ones makes the whole range ordered -NaN < -inf < ... < -0 < +0 <
... < inf < NaN, which is TOTALORDER. Floats of 8 bits or fewer are widened to f32 first, as XLA
CPU does (so the fnuz types' NaN compares as -NaN).
"""

from __future__ import annotations

from ..ir import Instruction, Module, Opcode, PrimitiveType
from ..util.record import dataclass
from .base import Pass, register_pass
from .expand_builder import Emit
from .rewrite import P, RuleTable, rewrite_module

COMPARISON_RULES = RuleTable("comparison-expander")
_b = Emit()
_SIGNED = {16: PrimitiveType.S16, 32: PrimitiveType.S32, 64: PrimitiveType.S64}


def total_order_key(x: Instruction) -> Instruction:
    """Signed integers ordered like x's floats under TOTALORDER."""
    if x.shape.dtype.bits <= 8:
        x = _b.convert(x, PrimitiveType.F32)
    width = x.shape.dtype.bits
    itype = _SIGNED[width]
    bits = _b.convert(x, itype, Opcode.BITCAST_CONVERT)
    dims = x.shape.dims
    negative = _b.compare(bits, _b.full(0, itype, dims), "LT", "SIGNED")
    flipped = _b.xor(bits, _b.full((1 << (width - 1)) - 1, itype, dims))
    return _b.select(negative, flipped, bits)


def _total_order_float(instr: Instruction) -> bool:
    return (instr.attrs.comparison_type == "TOTALORDER"
            and instr.operands[0].shape.dtype.is_float)


@COMPARISON_RULES.rule(P(Opcode.COMPARE, where=_total_order_float))
def expand_total_order(instr):
    """compare(a, b, type=TOTALORDER) → compare(key(a), key(b), type=SIGNED)."""
    a, b = instr.operands
    result = _b.compare(total_order_key(a), total_order_key(b),
                        instr.attrs.comparison_direction, "SIGNED")
    result.shape = instr.shape
    return result


@register_pass
@dataclass
class ComparisonExpander(Pass):
    """Rewrites TOTALORDER comparisons of floats into SIGNED comparisons of integer keys.

    Assumes: a valid module. Guarantees: no float compare with type TOTALORDER remains; results
    are bit-identical (-0 < +0, NaNs ordered by sign and payload); other compares untouched.
    """

    name = "comparison-expander"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, COMPARISON_RULES).changed
