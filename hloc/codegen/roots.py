"""The values a kernel writes: the leaves of its computation's root, in output order.

Shared by the CPU and CUDA kernel builders (a root tuple is flattened depth-first; each item
is one instruction and the kernel output indices of its leaves).
"""

from __future__ import annotations

from ..ir import Computation, Instruction, Opcode
from ..util.record import dataclass


@dataclass(frozen=True)
class RootItem:
    """One value the kernel writes: an instruction and the output buffers of its leaves."""

    instr: Instruction
    outputs: tuple[int, ...]


def root_items(comp: Computation) -> list[RootItem]:
    items: list[RootItem] = []
    count = 0

    def visit(instr: Instruction) -> None:
        nonlocal count
        if instr.opcode == Opcode.TUPLE:
            for o in instr.operands:
                visit(o)
            return
        n = sum(1 for _ in instr.shape.leaves())
        items.append(RootItem(instr, tuple(range(count, count + n))))
        count += n

    visit(comp.root)
    return items
