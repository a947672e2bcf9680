"""Reshapes and transposes that move no element become bitcasts (layout-sensitive).

After layout assignment every buffer has a concrete layout. A reshape between row-major
shapes keeps every element at its linear position, and so does a transpose that only moves
size-1 dimensions; as bitcasts they cost nothing: buffer assignment lets the result share its
operand's buffer, where a reshape is a copy kernel. XLA's layout-sensitive simplifier makes
the same replacement, which is why XLA's optimized modules are full of bitcasts.

It runs after fusion: a reshape fusion can absorb costs nothing already, and a bitcast
between two fusible ops would keep them apart. What is left unfused would be a copy kernel.

Assumes: layout-assignment has run (shapes carry their final layouts). Guarantees: values are
unchanged; only reshape/transpose instructions of equal element type and row-major layouts on
both sides are replaced, in computations that are not fused computations.
"""

from __future__ import annotations

from ..ir import Instruction, Module, Opcode, Shape
from ..util.record import dataclass
from .base import Pass, register_pass


def _row_major(shape: Shape) -> bool:
    return shape.is_array and (shape.layout is None or shape.layout.is_row_major) \
        and not (shape.layout is not None and (shape.layout.tiles or shape.layout.memory_space))


def moves_elements(instr: Instruction) -> bool:
    """Whether a transpose or copy puts elements elsewhere in memory under the layouts its
    shapes carry (a layout-changing one is a copy kernel: after layout assignment, a
    transposed operand of a dot, `x @ w.T` in a loop body, is a transpose of every step)."""
    if instr.opcode == Opcode.TRANSPOSE:
        source = list(instr.attrs.dimensions)
    elif instr.opcode == Opcode.COPY:
        source = list(range(instr.shape.rank))
    else:
        return False
    return permutes_memory(source, instr.operands[0].shape, instr.shape)


def permutes_memory(source: list[int], operand: Shape, result: Shape) -> bool:
    """Whether result[i] = operand[i permuted by `source`] (result dimension d is operand
    dimension source[d]) puts elements elsewhere in memory under the shapes' layouts."""
    if operand.layout is not None and (operand.layout.tiles or operand.layout.memory_space):
        return True
    order = [source[d] for d in result.major_to_minor() if result.dims[d] != 1]
    return order != [d for d in operand.major_to_minor() if operand.dims[d] != 1]


def moves_no_element(instr: Instruction) -> bool:
    """Whether `instr` (reshape/transpose) keeps every element at its physical position,
    row-major on both sides (as a bitcast)."""
    operand = instr.operands[0]
    if operand.shape.element_type != instr.shape.element_type:
        return False
    if not (_row_major(operand.shape) and _row_major(instr.shape)):
        return False
    return instr.opcode == Opcode.RESHAPE or not moves_elements(instr)


@register_pass
@dataclass
class BitcastReshapes(Pass):
    """Replaces reshapes/transposes that move no element with bitcasts."""

    name = "bitcast-reshapes"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in module.computations:
            if comp.is_fusion:
                continue
            for instr in list(comp.instructions):
                if instr.opcode in (Opcode.RESHAPE, Opcode.TRANSPOSE) and moves_no_element(instr):
                    bitcast = Instruction(Opcode.BITCAST, instr.shape, [instr.operands[0]],
                                          name="bitcast", metadata=instr.metadata)
                    comp.replace_instruction(instr, bitcast)
                    changed = True
        return changed
