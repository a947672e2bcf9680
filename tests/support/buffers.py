"""Shared checks for the buffer-assignment tests.

`check_plan(plan)` verifies the properties issue 5 asks for on an assignment:
- every slice lies within its allocation;
- no two values whose live ranges overlap share bytes, unless they are in the same HloBuffer
  or the later one is written, at the very tick the earlier one dies, by the instruction
  that reads it (operand reuse / in-place update);
- entry outputs do not overlap each other, nor parameters unless input_output_alias allows.
`MemoryAudit` is an independent oracle: run as the arena executor's observer, it records
which HloBuffer last wrote every byte and checks that every thunk reads its operands from
bytes its operands' buffers wrote (no live value was clobbered).
"""

from __future__ import annotations

import numpy as np

from hloc.frontend import load
from hloc.ir.verifier import verify
from hloc.passes import PassRunner, parse_spec
from hloc.plan import Plan, plan
from hloc.runtime.arena import run_program
from hloc.runtime.interpreter import evaluate

CONTROL = frozenset({"while", "conditional", "sequential"})


def prepare(path_or_module, spec: str = "inline,dce"):
    module = load(path_or_module).module if not hasattr(path_or_module, "entry") else path_or_module
    PassRunner(parse_spec(spec)).run(module)
    return module


def plan_checked(module, target: str = "cpu", **kw) -> Plan:
    p = plan(module, target=target, **kw)
    verify(module)
    check_plan(p)
    return p


def check_plan(p: Plan) -> None:
    a = p.assignment
    sizes = {al.index: al.size for al in a.allocations}
    for v in a.dataflow.values:
        s = a.value_slice(v)
        assert s.size == v.size, (v, s)
        assert 0 <= s.offset and s.offset + s.size <= sizes[s.allocation], (v, s, sizes[s.allocation])
    _check_overlaps(a)
    _check_scratch(a, sizes)
    _check_outputs(p)


def _check_scratch(a, sizes) -> None:
    """An instruction's scratch lies in its allocation and shares no byte with a value live
    at its tick (operands and outputs included) nor with another scratch."""
    ticks = {i.name: t for i, t in a.liveness.timeline.start.items()}
    live = a.liveness
    spans = []
    for name, s in a.scratch.items():
        assert 0 <= s.offset and s.offset + s.size <= sizes[s.allocation], (name, s)
        spans.append((s.allocation, s.offset, s.offset + s.size, name))
        t = ticks[name]
        for v in a.dataflow.values:
            vs = a.value_slice(v)
            if (vs.size and vs.allocation == s.allocation and live.value_start[v.id] <= t
                    <= live.value_end[v.id] and vs.offset < s.offset + s.size
                    and s.offset < vs.offset + vs.size):
                raise AssertionError(f"scratch of %{name} {s} overlaps {v} {vs} live at tick {t}")
    spans.sort()
    for (a1, _, e1, n1), (a2, b2, _, n2) in zip(spans, spans[1:], strict=False):
        assert a1 != a2 or e1 <= b2 or ticks[n1] != ticks[n2], f"scratch of {n1} and {n2} overlap"


def _check_overlaps(a) -> None:
    live = a.liveness
    df = a.dataflow
    by_alloc: dict[int, list] = {}
    for v in df.values:
        s = a.value_slice(v)
        if s.size:
            by_alloc.setdefault(s.allocation, []).append((s.offset, s.offset + s.size, v))
    for entries in by_alloc.values():
        entries.sort(key=lambda e: (e[0], e[1], e[2].id))
        active: list = []
        for lo, hi, v in entries:
            active = [e for e in active if e[1] > lo]
            for _, _, u in active:
                _check_pair(a, live, u, v)
            active.append((lo, hi, v))


def _check_pair(a, live, u, v) -> None:
    if a.alias.buffer_of(u) is a.alias.buffer_of(v):
        return
    us, ue = live.value_start[u.id], live.value_end[u.id]
    vs, ve = live.value_start[v.id], live.value_end[v.id]
    if ue < vs or ve < us:
        return
    first, second = (u, v) if us <= vs else (v, u)
    touching = live.value_end[first.id] == live.value_start[second.id]
    reader = second.instruction
    reads = any(val is first for op in reader.operands for _, val in a.dataflow.leaves_of(op))
    assert touching and reads, (
        f"{u} [{us},{ue}] and {v} [{vs},{ve}] share bytes "
        f"({a.value_slice(u)} / {a.value_slice(v)}) while both live")


def _check_outputs(p: Plan) -> None:
    a = p.assignment
    module = p.module
    params = {al.index: al for al in a.allocations if al.kind == "parameter"}
    aliased = {(tuple(x.output_index), x.parameter_number) for x in module.input_output_alias}
    outs = p.program.outputs
    for index, s in outs:
        if s.allocation in params:
            assert (tuple(index), params[s.allocation].parameter_number) in aliased, (index, s)
    spans = sorted((s.allocation, s.offset, s.offset + s.size, i) for i, s in outs if s.size)
    for (a1, _, e1, i1), (a2, b2, _, i2) in zip(spans, spans[1:], strict=False):
        assert a1 != a2 or e1 <= b2, f"outputs {i1} and {i2} overlap"


class MemoryAudit:
    """Observer for the arena executor: which HloBuffer last wrote each byte."""

    def __init__(self, p: Plan):
        a = p.assignment
        self.a = a
        self.instrs = {i.name: i for c in p.module.computations for i in c.instructions}
        self.owner = {al.index: np.full(al.size, -1, np.int64) for al in a.allocations}
        for al in a.allocations:
            if al.kind in ("parameter", "constant"):
                for vid, _, _ in al.assigned:
                    v = a.dataflow.values[vid]
                    if v.instruction.opcode.value in ("parameter", "constant"):
                        self._mark(a.value_slice(v), a.alias.buffer_of(v).id)
        self.reads = 0

    def _mark(self, s, owner: int) -> None:
        self.owner[s.allocation][s.offset:s.offset + s.size] = owner

    def _expect(self, s, owner: int, what) -> None:
        got = self.owner[s.allocation][s.offset:s.offset + s.size]
        bad = got[got != owner]
        assert bad.size == 0, (f"{what}: {s} should hold buffer {owner}, bytes were last written "
                               f"for buffer(s) {sorted(set(bad.tolist()))}")
        self.reads += 1

    def __call__(self, thunk) -> None:
        a = self.a
        instr = self.instrs[thunk.name]
        if thunk.kind == "while" or thunk.kind == "sequential":
            return
        operands = instr.operands[:1] if thunk.kind == "conditional" else instr.operands
        for op in operands:
            for _, v in a.dataflow.leaves_of(op):
                self._expect(a.value_slice(v), a.alias.buffer_of(v).id, f"{instr.name} reads {v}")
        if thunk.kind in CONTROL:
            return
        for _, v in a.dataflow.leaves_of(instr):
            self._mark(a.value_slice(v), a.alias.buffer_of(v).id)

    def check_outputs(self) -> None:
        a = self.a
        for _, v in a.dataflow.leaves_of(a.module.entry.root):
            self._expect(a.value_slice(v), a.alias.buffer_of(v).id, f"output {v}")


def run_audited(p: Plan, args) -> list[np.ndarray]:
    audit = MemoryAudit(p)
    out = run_program(p.module, p.program, args, observer=audit)
    audit.check_outputs()
    return out


def interpret(module, args) -> list[np.ndarray]:
    return [np.asarray(x) for x in evaluate(module, args).flatten()]


def same_bits(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    return got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()
