"""Live ranges over the flattened module schedule.

The timeline is the entry's sequence with each control-flow instruction's nested sequences
spliced in where it runs: a while at ticks [start, end] holds its condition's then its body's
sequence in between, a conditional holds every branch's sequence, a call its callee's. Every
sequential computation also gets a tick before its first instruction (its parameters are
defined there) and one after its last (its root is read there).

A value lives from its definition to its last use: a reader's start tick, or the end tick of
a computation whose root holds it; entry outputs live to the very end. A while or conditional
defines its result at its end tick. Buffer ranges are the hull of their values' ranges.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Computation, Instruction, Module, Opcode
from .alias import AliasAnalysis
from .call_graph import nested_sequences


class Timeline:
    """Tick numbers for every instruction and sequential computation of a scheduled module."""

    def __init__(self, module: Module, sequences: dict[Computation, list[Instruction]]):
        self.sequences = sequences
        self.start: dict[Instruction, int] = {}
        self.end: dict[Instruction, int] = {}
        self.comp_start: dict[Computation, int] = {}
        self.comp_end: dict[Computation, int] = {}
        self.order: list[Instruction] = []  # every scheduled instruction, by start tick
        self._tick = 0
        self._visit(module.entry)
        self.length = self._tick

    def _next(self) -> int:
        t = self._tick
        self._tick += 1
        return t

    def _visit(self, comp: Computation) -> None:
        if comp not in self.sequences:
            raise UnsupportedError(f"computation {comp.name} has no schedule")
        self.comp_start[comp] = self._next()
        for instr in self.sequences[comp]:
            self.start[instr] = self._next()
            self.order.append(instr)
            for callee in nested_sequences(instr):
                self._visit(callee)
            self.end[instr] = self._next() if instr.opcode in _SPANNING else self.start[instr]
        self.comp_end[comp] = self._next()


_SPANNING = frozenset({Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL})


def sequences_from_schedule(module: Module, comps) -> dict[Computation, list[Instruction]]:
    """The module's schedule (names) as instruction lists for the given computations."""
    if module.schedule is None:
        raise UnsupportedError(f"module {module.name} is not scheduled")
    out = {}
    for comp in comps:
        by_name = {i.name: i for i in comp.instructions}
        names = module.schedule.get(comp.name)
        if names is None or len(names) != len(by_name):
            raise UnsupportedError(f"the schedule of computation {comp.name} is missing or stale")
        out[comp] = [by_name[n] for n in names]
    return out


class Liveness:
    """Live ranges (inclusive tick intervals) of every value and buffer."""

    def __init__(self, alias: AliasAnalysis, timeline: Timeline):
        self.alias = alias
        self.timeline = timeline
        df = alias.dataflow
        n = len(df.values)
        self.value_start = [0] * n
        self.value_end = [0] * n
        for value in df.values:
            self.value_start[value.id] = self._def_tick(value)
            self.value_end[value.id] = self._last_use(value)
        self.buffer_start = [min(self.value_start[v.id] for v in b.values) for b in alias.buffers]
        self.buffer_end = [max(self.value_end[v.id] for v in b.values) for b in alias.buffers]

    def _def_tick(self, value) -> int:
        instr = value.instruction
        if instr.opcode == Opcode.PARAMETER:
            return self.timeline.comp_start[instr.parent]
        return self.timeline.end[instr]

    def _last_use(self, value) -> int:
        t = self.value_start[value.id]
        start = self.timeline.start
        for use in value.uses:
            t = max(t, start[use.instruction])
        for comp in value.root_of:
            t = max(t, self.timeline.comp_end[comp])
        return t

    def value_range(self, value) -> tuple[int, int]:
        return self.value_start[value.id], self.value_end[value.id]

    def buffer_range(self, buffer) -> tuple[int, int]:
        return self.buffer_start[buffer.id], self.buffer_end[buffer.id]
