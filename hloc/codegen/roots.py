"""The values a kernel writes: the leaves of its computation's root, in output order.

Shared by the CPU and CUDA kernel builders (a root tuple is flattened depth-first; each item
is one instruction and the kernel output indices of its leaves).
"""

from __future__ import annotations

from ..analysis.sharing import in_update_pass, update_source
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


def copied_item(items: list[RootItem], k: int) -> int | None:
    """The root item whose value item `k` (a dynamic-update-slice) writes into its operand
    (through reshapes: `update_source`), or None. A kernel updating in place may compute that
    item in the same pass over the update's elements (update-fusion makes such kernels), as
    long as it does not read the operand being updated (a thread would read what another
    already overwrote)."""
    instr = items[k].instr
    if instr.opcode != Opcode.DYNAMIC_UPDATE_SLICE:
        return None
    source = update_source(instr.operands[1])
    for j, item in enumerate(items):
        if j != k and item.instr is source and len(item.outputs) == 1:
            return None if reads(source, instr.operands[0]) else j
    return None


def pass_items(items: list[RootItem], k: int) -> list[int]:
    """The root items a kernel updating item `k` (a dynamic-update-slice) in place computes in
    its pass over the update's elements: the value the update copies (`copied_item`), then
    every other one-output elementwise item of that value's dims (`sharing.in_update_pass`),
    each at the update element's index. A thread computes all of them at one index before it
    stores any: the buffer assignment may let such an item overwrite an operand the others
    read at that index (an LSTM's cell state; sharing.can_share_operand)."""
    update = items[k].instr
    copied = copied_item(items, k)
    out = [] if copied is None else [copied]
    if sum(i.instr.opcode == Opcode.DYNAMIC_UPDATE_SLICE for i in items) > 1:
        return out  # sharing.in_place_update: never with two updates
    for j, item in enumerate(items):
        if j not in (k, copied) and len(item.outputs) == 1 and \
                item.instr.opcode != Opcode.DYNAMIC_UPDATE_SLICE and \
                in_update_pass(item.instr, update) and not reads(item.instr, update.operands[0]):
            out.append(j)
    return out


def reads(instr: Instruction, target: Instruction) -> bool:
    """Whether `instr` is `target` or reads it, directly or through other instructions."""
    stack, seen = [instr], set()
    while stack:
        x = stack.pop()
        if x is target:
            return True
        if id(x) not in seen:
            seen.add(id(x))
            stack.extend(x.operands)
    return False
