"""The edits `hloc reduce` tries. Each step names its targets in a module and applies an edit
to a fresh copy; the driver (reduce.py) cleans up, verifies and keeps what stays interesting.

Steps, roughly biggest cut first:
- root: make an earlier entry instruction the entry's root (everything after it dies);
- param: replace entry instructions by new entry parameters of their shape (their operands die);
- operand: replace an instruction by one of its operands of the same shape (any computation);
- zero: replace an instruction by a zero constant (broadcast when not scalar; any computation);
- shrink: text-level, a dimension size replaced by 1 or halved in every shape it appears in.
Names address instructions: they are unique in a module and survive print → parse.
"""

from __future__ import annotations

import re

import numpy as np

from ..ir import Attrs, Instruction, Literal, Module, Opcode, Shape
from ..ir.opcodes import SIDE_EFFECTING
from ..util.record import dataclass

_KEEP = frozenset({Opcode.PARAMETER}) | SIDE_EFFECTING


def _by_name(module: Module) -> dict[str, Instruction]:
    return {i.name: i for c in module.computations for i in c.instructions}


def _replaceable(instr: Instruction) -> bool:
    return instr.opcode not in _KEEP and instr.shape.is_array


@dataclass(frozen=True)
class Step:
    """A kind of edit: `targets(module)` in trying order, `apply(module, chunk) -> changed`."""

    name: str
    batch: bool  # whether chunks of several targets are tried together (ddmin)

    def targets(self, module: Module) -> list[str]:
        raise NotImplementedError

    def apply(self, module: Module, chunk: list[str]) -> bool:
        raise NotImplementedError


class RootStep(Step):
    """Entry instructions, earliest first: the candidate new roots."""

    def targets(self, module: Module) -> list[str]:
        entry = module.entry
        return [i.name for i in entry.post_order()
                if i is not entry.root and i.opcode != Opcode.PARAMETER and not i.shape.is_token]

    def apply(self, module: Module, chunk: list[str]) -> bool:
        module.entry.root = _by_name(module)[chunk[0]]
        return True


class ParamStep(Step):
    """Entry instructions, latest first (replacing a late one cuts the most)."""

    def targets(self, module: Module) -> list[str]:
        return [i.name for i in reversed(module.entry.post_order()) if _replaceable(i)]

    def apply(self, module: Module, chunk: list[str]) -> bool:
        entry, named = module.entry, _by_name(module)
        for name in chunk:
            old = named[name]
            number = entry.num_parameters
            new = Instruction(Opcode.PARAMETER, old.shape, name=f"p{number}",
                              attrs=Attrs(parameter_number=number))
            entry.replace_instruction(old, new)
        return True


class OperandStep(Step):
    """Instructions with an operand of their own shape, in every computation."""

    def targets(self, module: Module) -> list[str]:
        return [i.name for c in module.computations for i in reversed(c.post_order())
                if _replaceable(i) and _same_shape_operand(i) is not None]

    def apply(self, module: Module, chunk: list[str]) -> bool:
        named = _by_name(module)
        for name in chunk:
            instr = named[name]
            operand = _same_shape_operand(instr)
            if operand is None or instr.parent is None:
                continue
            instr.parent.replace_instruction(instr, operand)
        return True


def _same_shape_operand(instr: Instruction) -> Instruction | None:
    for op in instr.operands:
        if op.shape == instr.shape:
            return op
    return None


class ZeroStep(Step):
    """Non-constant array instructions, in every computation."""

    def targets(self, module: Module) -> list[str]:
        return [i.name for c in module.computations for i in reversed(c.post_order())
                if _replaceable(i) and i.opcode != Opcode.CONSTANT
                and not (i.opcode == Opcode.BROADCAST and i.operands[0].opcode == Opcode.CONSTANT)]

    def apply(self, module: Module, chunk: list[str]) -> bool:
        named = _by_name(module)
        for name in chunk:
            old = named[name]
            comp = old.parent
            scalar = Shape.scalar(old.shape.element_type)
            zero = Literal(scalar, np.zeros((), scalar.np_dtype))
            const = comp.create(Opcode.CONSTANT, scalar, name="zero", attrs=Attrs(literal=zero))
            new = const if not old.shape.dims else comp.create(
                Opcode.BROADCAST, old.shape, [const], name="zeros", attrs=Attrs(dimensions=()))
            comp.replace_instruction(old, new)
        return True


STEPS: tuple[Step, ...] = (RootStep("root", False), ParamStep("param", True),
                           OperandStep("operand", True), ZeroStep("zero", True))

# An array shape in HLO text: an element type, then the dimension sizes in brackets.
_SHAPE = re.compile(r"(?<![\w.])((?:pred|bf16|[suf]\d+\w*|c64|c128)\[)([0-9,]*)(\])")


def dim_sizes(text: str) -> list[int]:
    """Distinct dimension sizes above 1 in the text's shapes, largest first."""
    sizes = {int(d) for m in _SHAPE.finditer(text) for d in m.group(2).split(",") if d}
    return sorted((s for s in sizes if s > 1), reverse=True)


def shrink_dim(text: str, old: int, new: int) -> str:
    """Every dimension of size `old` in every shape of the text becomes `new`."""

    def fix(m: re.Match) -> str:
        dims = ",".join(str(new) if d == str(old) else d for d in m.group(2).split(",") if d)
        return m.group(1) + dims + m.group(3)

    return _SHAPE.sub(fix, text)
