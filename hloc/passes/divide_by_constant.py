"""Division by a constant becomes multiplication by its reciprocal, as XLA's simplifier does.

XLA's algebraic simplifier, which runs at every optimization level, rewrites `a / c` for a
float or complex constant `c` (or a broadcast of one) and a non-constant `a` into
`a * (1/c)`, the reciprocal rounded to the element type. The product can differ from the
quotient in the last bit: `jnp.mean(x)` is `sum / n`, so every mean XLA computes is
`sum * (1/n)`. This pass makes the same rewrite so values match XLA's bit for bit; it is not
an exact rewrite, which is why it is not one of the algebraic simplifier's rules.

XLA runs it after float normalization, so a bf16 (f8) division is an f32 (f16) one by then:
`convert(a) / convert(c)` with the convert of the constant folded. The pass therefore sees
through a widening convert of the constant, and a division still in a type that float
normalization widens (the interpreter's pipeline has no normalization) is rewritten in the
wide type, with converts around it, exactly as XLA evaluates it.
"""

from __future__ import annotations

import math

from ..ir import Instruction, Literal, Module, Opcode, PrimitiveType, Shape, dtypes, packing
from ..util.record import dataclass
from .base import Pass, register_pass
from .expand_builder import Emit
from .float_normalization import compute_types
from .rewrite import P, RuleTable, constant, new, rewrite_module

Op = Opcode
_b = Emit()
DIVIDE_RULES = RuleTable("divide-by-constant")
# The type XLA CPU computes each narrow float type's arithmetic in (float normalization).
WIDE = compute_types(bf16=True, f16="none", f8=True, f8_compute="f16")


def _constant_divisor(b: Instruction) -> tuple[Literal, PrimitiveType, tuple[int, ...] | None] | None:
    """The divisor's constant, the type its values are divided in before any widening (the
    convert's target for a widened constant), and, for a broadcast, its dimensions mapping.
    Reads no values: deciding whether the rule applies needs no NumPy."""
    mapping = None
    if b.opcode == Op.BROADCAST:
        mapping = tuple(b.attrs.dimensions or ())
        b = b.operands[0]
    if b.opcode == Op.CONVERT:
        src = b.operands[0]
        if src.opcode != Op.CONSTANT or not _widens(src.shape.element_type, b.shape.element_type):
            return None
        return src.literal, b.shape.element_type, mapping
    if b.opcode == Op.CONSTANT and b.literal is not None:
        return b.literal, b.shape.element_type, mapping
    return None


# Reciprocals computed in Python (correctly rounded in f64, then rounded to the narrower
# type: double rounding cannot change a quotient rounded to 24 bits or fewer, as f64 holds
# more than twice that many), so that a compile dividing by a constant imports no NumPy.
_PYTHON_RECIPROCAL = frozenset({PrimitiveType.F16, PrimitiveType.F32, PrimitiveType.F64})


def _python_reciprocal(literal: Literal, wide: PrimitiveType) -> Literal | None:
    """1 / every element of `literal` in type `wide`, as NumPy computes it, or None where
    only NumPy says (a type struct cannot hold, zero, inf or NaN, a result out of range)."""
    values = literal.python_values()
    if wide not in _PYTHON_RECIPROCAL or values is None:
        return None
    if not all(isinstance(v, float) and math.isfinite(v) and v != 0.0 for v in values):
        return None
    data = packing.pack([1.0 / v for v in values], wide)
    return None if data is None else Literal(Shape.array(wide, literal.shape.dims), data=data)


def _widens(narrow: PrimitiveType, wide: PrimitiveType) -> bool:
    a, b = dtypes.info(narrow), dtypes.info(wide)
    return a.is_float and b.is_float and a.bits < b.bits


def _applies(instr: Instruction) -> bool:
    if not instr.shape.is_array:
        return False
    kind = instr.shape.dtype
    if not (kind.is_float or kind.is_complex):
        return False
    a, b = instr.operands
    return a.opcode != Op.CONSTANT and _constant_divisor(b) is not None


@DIVIDE_RULES.rule(P(Op.DIVIDE, where=_applies))
def reciprocal(instr):
    """a / c → a * (1/c), the reciprocal rounded to the type the division runs in."""
    a, b = instr.operands
    literal, divided_in, mapping = _constant_divisor(b)
    ptype = instr.shape.element_type
    wide = WIDE.get(ptype, ptype)
    inverse = _python_reciprocal(literal, wide)
    if inverse is None:
        import numpy as np

        compute = dtypes.to_numpy(wide)
        values = literal.array.astype(dtypes.to_numpy(divided_in))
        with np.errstate(all="ignore"):
            array = (np.asarray(1, compute) / np.asarray(values).astype(compute)).astype(compute)
        inverse = Literal(Shape.array(wide, array.shape), array)
    c: Instruction = constant(inverse)
    if mapping is not None:
        c = new(Op.BROADCAST, Shape.array(wide, instr.shape.dims), [c], dimensions=mapping)
    product = _b.mul(_b.convert(a, wide), c)
    result = _b.convert(product, ptype)
    result.shape = instr.shape
    return result


@register_pass
@dataclass
class DivideByConstant(Pass):
    """Rewrites a / c, c a float constant, into a * (1/c), as XLA's simplifier always does.

    Assumes: a valid module. Guarantees: every float or complex divide whose dividend is not a
    constant and whose divisor is a constant, a broadcast of one, or a widening convert of
    one, becomes a multiply by the reciprocal rounded to the type the division runs in (f32
    for bf16, f16 for f8, with converts around it), so values equal XLA CPU's, which are not
    always the correctly rounded quotient.
    """

    name = "divide-by-constant"

    def run(self, module: Module) -> bool:
        return rewrite_module(module, DIVIDE_RULES).changed
