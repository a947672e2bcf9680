"""The per-computation memory model the schedulers optimize.

For one sequential computation: which HloBuffers each instruction touches (reads or defines),
which of them the computation itself may free (temporaries: not parameters, constants, entry
outputs, the computation's own result or storage that comes from outside), and their sizes.
An instruction *allocates* a freeable buffer when it is the first of the computation to define
a value in it, and *frees* it when it is the last instruction touching it.
"""

from __future__ import annotations

from ..analysis import FORWARDING, AliasAnalysis
from ..ir import Computation, Instruction, Opcode


class MemoryModel:
    """Buffers touched / defined per instruction of `comp`, and freeable buffer sizes."""

    def __init__(self, alias: AliasAnalysis, comp: Computation, inside: frozenset[Computation]):
        df = alias.dataflow
        self.comp = comp
        self.touches: dict[Instruction, tuple[int, ...]] = {}
        self.defines: dict[Instruction, tuple[int, ...]] = {}
        self.size: dict[int, int] = {}  # freeable buffer id -> bytes (others absent)
        candidates: dict[int, object] = {}
        for instr in comp.instructions:
            defined = tuple(dict.fromkeys(alias.buffer_of(v).id for v in df.defined_by(instr)))
            read: list[int] = []
            if instr.opcode not in FORWARDING:
                for op in instr.operands:
                    read.extend(alias.buffer_of(v).id for _, v in df.leaves_of(op))
            self.defines[instr] = defined
            self.touches[instr] = tuple(dict.fromkeys(defined + tuple(read)))
            for b in self.touches[instr]:
                candidates.setdefault(b, alias.buffers[b])
        for bid, buf in candidates.items():
            if _freeable(buf, comp, inside):
                self.size[bid] = buf.size

    def touchers(self) -> dict[int, list[Instruction]]:
        out: dict[int, list[Instruction]] = {}
        for instr, bufs in self.touches.items():
            for b in bufs:
                out.setdefault(b, []).append(instr)
        return out

    def peak(self, order: list[Instruction]) -> int:
        """Peak bytes of freeable buffers live at once when `comp` runs in `order`."""
        remaining = {b: len(t) for b, t in self.touchers().items()}
        allocated: set[int] = set()
        current = peak = 0
        for instr in order:
            for b in self.defines[instr]:
                if b in self.size and b not in allocated:
                    allocated.add(b)
                    current += self.size[b]
            peak = max(peak, current)
            for b in self.touches[instr]:
                remaining[b] -= 1
                if remaining[b] == 0 and b in self.size and b in allocated:
                    current -= self.size[b]
        return peak


def _freeable(buf, comp: Computation, inside: frozenset[Computation]) -> bool:
    entry = comp.parent.entry if comp.parent is not None else None
    for v in buf.values:
        instr = v.instruction
        if instr.opcode == Opcode.CONSTANT:
            return False
        if instr.parent is comp and instr.opcode == Opcode.PARAMETER:
            return False
        if instr.parent not in inside:  # storage that comes from an enclosing computation
            return False
        if comp in v.root_of or entry in v.root_of:
            return False
    return True
