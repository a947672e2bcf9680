"""Operand-buffer reuse: group buffers into storage units before packing.

When an instruction may overwrite an operand as it computes (sharing.can_share_operand:
elementwise ops, elementwise loop fusions, sorts) and that operand's storage dies at the
instruction with the same size, the output takes the operand's storage over:
- a temporary output joins the operand's unit (one heap item spans both live ranges);
- an entry output absorbs the operand's unit: the unit lives at offset 0 of the output's
  allocation (XLA shares such operands with live-out buffers too).
"""

from __future__ import annotations

from ..analysis import AliasAnalysis, HloValue, Liveness, can_share_operand
from ..ir import Opcode


class StorageUnits:
    """Temp buffers grouped into units (keyed by their first buffer id, in definition order),
    and `absorbed`: output buffer id -> the unit stored in its allocation before it."""

    def __init__(self, alias: AliasAnalysis, liveness: Liveness, kinds: list[str],
                 absorb_outputs: bool = True):
        self.alias = alias
        self.absorb_outputs = absorb_outputs
        self.liveness = liveness
        self.kinds = kinds
        temps = [b.id for b in alias.buffers if kinds[b.id] == "temp"]
        self.unit_of = {b: b for b in temps}
        self.members = {b: [b] for b in temps}
        self.end = {b: liveness.buffer_end[b] for b in temps}
        self.size = {b: alias.buffers[b].size for b in temps}
        self.absorbed: dict[int, int] = {}
        self.taken_at: dict[int, int] = {}  # unit -> tick an output last took it over
        for instr in liveness.timeline.order:
            for value in alias.dataflow.defined_by(instr):
                self._consider(instr, value)

    def _consider(self, instr, value: HloValue) -> None:
        out = self.alias.buffer_of(value).id
        tick = self.liveness.timeline.start[instr]
        if self.liveness.buffer_start[out] != tick:
            return
        fresh_temp = self.kinds[out] == "temp" and self.members.get(out) == [out]
        fresh_output = (self.absorb_outputs and self.kinds[out] == "output"
                        and out not in self.absorbed)
        if not (fresh_temp or fresh_output):
            return
        unit = self._dying_operand(instr, value, out, tick)
        if unit is None:
            return
        self.taken_at[unit] = tick
        if fresh_temp:
            self.members[unit].extend(self.members.pop(out))
            self.unit_of[out] = unit
            self.end[unit] = self.end.pop(out)
        else:
            self.absorbed[out] = unit
            self.end[unit] = None  # lives on in the output's allocation

    def _dying_operand(self, instr, value: HloValue, out: int, tick: int) -> int | None:
        size = self.alias.buffers[out].size
        trees = [self.alias.dataflow.tree(op) for op in instr.operands]
        for k, tree in enumerate(trees):
            if not isinstance(tree, HloValue):
                continue
            unit = self.unit_of.get(self.alias.buffer_of(tree).id)
            if unit is None or unit == self.unit_of.get(out) or self.end.get(unit) != tick:
                continue
            if self.taken_at.get(unit) == tick or self.size[unit] != size:
                continue
            # Only elementwise users may read the storage they overwrite at other operands.
            repeated = sum(t is tree for t in trees) > 1
            if can_share_operand(instr, k, value.index) and not (
                    repeated and instr.opcode == Opcode.SORT):
                return unit
        return None

    def shares_operand_storage(self, instr) -> bool:
        """Whether `instr`'s output leaves are stored where one of its operands is (the same
        buffer, or a unit the output took over)."""
        df = self.alias.dataflow
        outs = {self.alias.buffer_of(v).id for _, v in df.leaves_of(instr)}
        homes = {self.absorbed.get(b, self.unit_of.get(b, b)) for b in outs}
        for op in instr.operands:
            for _, v in df.leaves_of(op):
                b = self.alias.buffer_of(v).id
                if b in outs or self.unit_of.get(b, b) in homes:
                    return True
        return False

    def units(self) -> dict[int, list[int]]:
        start = self.liveness.buffer_start
        return dict(sorted(self.members.items(), key=lambda kv: (start[kv[0]], kv[0])))
