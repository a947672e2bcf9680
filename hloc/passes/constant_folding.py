"""Constant folding with the reference interpreter."""

from __future__ import annotations

import operator

from ..errors import UnsupportedError
from ..ir import Instruction, Literal, Module, Opcode, Shape, packing
from ..util.log import get_logger
from ..util.record import dataclass
from .base import Pass, option, register_pass
from .rewrite import P, RuleTable, constant, has_side_effects, rewrite_module

log = get_logger("hloc.passes.constant_folding")
Op = Opcode

# Never folded: control flow (the simplifiers handle constant predicates and trip counts),
# random numbers, tuples (a tuple of constants is already as simple as it gets) and opaque calls.
_NEVER = frozenset({
    Op.PARAMETER, Op.CONSTANT, Op.WHILE, Op.CONDITIONAL, Op.CUSTOM_CALL, Op.RNG, Op.RNG_BIT_GENERATOR,
    Op.RNG_GET_AND_UPDATE_STATE, Op.TUPLE, Op.AFTER_ALL, Op.ADD_DEPENDENCY, Op.OPT_BARRIER,
})


def evaluate_instruction(instr: Instruction) -> Literal:
    """Evaluate one instruction whose operands are constants: in Python where it can
    (fold_in_python), else with the reference interpreter."""
    folded = fold_in_python(instr)
    return folded if folded is not None else interpret_instruction(instr)


def interpret_instruction(instr: Instruction) -> Literal:
    """Evaluate one instruction whose operands are constants with the reference interpreter."""
    import numpy as np

    from ..runtime.interpreter import evaluate_computation, to_literal, to_value
    from ..runtime.interpreter.registry import Context, lookup

    fn = lookup(instr)
    args = [to_value(o.shape, o.literal) for o in instr.operands]
    with np.errstate(all="ignore"):  # integer wrap-around and inf/NaN results are XLA semantics
        value = fn(Context(evaluate_computation), instr, args)
    return to_literal(instr.shape, value)


# Small integer and pred results computed in Python, to the interpreter's values: JAX lowers
# remainder and floor division by a constant with compares and selects of scalar constants
# (x == 0 ? 1 : x, sign(x)), index arithmetic reshapes small constants, and folding those
# through the interpreter imported NumPy, about 40 ms of a small module's compile. Results
# wrap to the type's width, as the interpreter's.
PYTHON_ELEMENTS = 64  # results up to this many elements
_COMPARE = {"EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le,
            "GT": operator.gt, "GE": operator.ge}
_ARITHMETIC = {  # integer element types only
    Op.ADD: operator.add, Op.SUBTRACT: operator.sub, Op.MULTIPLY: operator.mul,
    Op.NEGATE: operator.neg, Op.ABS: abs, Op.SIGN: lambda a: (a > 0) - (a < 0),
}
_ANY = {  # integer or pred element types
    Op.MAXIMUM: max, Op.MINIMUM: min, Op.AND: operator.and_, Op.OR: operator.or_,
    Op.XOR: operator.xor, Op.SELECT: lambda p, a, b: a if p else b, Op.CONVERT: lambda a: a,
}
_INTEGRAL_KINDS = ("int", "uint")


def fold_in_python(instr: Instruction) -> Literal | None:
    """The constant a small instruction of constant operands computes, where Python computes
    it as the interpreter does: a reshape of a literal kept as bytes, or an elementwise
    integer or pred op (above) of operands of the result's dims; None for anything else
    (another op or type, a type without a struct format, more than PYTHON_ELEMENTS)."""
    shape = instr.shape
    if not shape.is_array or shape.num_elements > PYTHON_ELEMENTS:
        return None
    if instr.opcode == Op.RESHAPE:  # the same elements in the same (row-major) order
        literal = instr.operands[0].literal
        return Literal(shape, data=literal.data) if literal.kept_as_bytes else None
    kind = shape.dtype.kind
    if shape.element_type not in packing.FORMATS or kind not in (*_INTEGRAL_KINDS, "pred"):
        return None
    columns = []
    for o in instr.operands:
        if o.shape.dims != shape.dims or o.shape.dtype.kind not in (*_INTEGRAL_KINDS, "pred"):
            return None
        found = o.literal.python_values()
        if found is None:
            return None
        columns.append(found)
    fn = _elementwise(instr, kind)
    if fn is None:
        return None
    results = [_wrapped(fn(*values), shape) for values in zip(*columns, strict=True)]
    data = packing.pack(results, shape.element_type)
    return None if data is None else Literal(shape, data=data)


def _elementwise(instr: Instruction, kind: str):
    """The Python function of one element of `instr` (result kind `kind`), or None."""
    op = instr.opcode
    if op == Op.COMPARE:
        # Only as the operands' type compares by default (a signed view of unsigned bits
        # is the interpreter's to say).
        natural = "SIGNED" if instr.operands[0].shape.dtype.kind == "int" else "UNSIGNED"
        if instr.attrs.comparison_type not in (None, natural):
            return None
        return _COMPARE.get(instr.attrs.comparison_direction)
    if op == Op.NOT:
        return operator.not_ if kind == "pred" else operator.invert
    if op in _ARITHMETIC:
        return _ARITHMETIC[op] if kind in _INTEGRAL_KINDS else None
    if op == Op.SELECT and instr.operands[0].shape.dtype.kind != "pred":
        return None
    return _ANY.get(op)


def _wrapped(value, shape: Shape):
    """`value` as an element of `shape`'s type holds it: wrapped to the width of an integer
    type (as NumPy's astype wraps), nonzero for pred."""
    return bool(value) if shape.dtype.kind == "pred" else shape.dtype.wrap(int(value))


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
