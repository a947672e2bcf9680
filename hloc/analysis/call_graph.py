"""Which computations run as thunk sequences, which are thread-local, and who calls them.

A computation is *sequential* when it is the entry or is called by a while (condition, body),
a conditional (branches) or a call: its instructions become thunks and own buffers. Every other
called computation (fusion bodies, reduce/sort/map/scatter/select-and-scatter/reduce-window
reducers, custom-call comparators) is *thread-local*: it runs inside one kernel and owns no
buffers. Buffer assignment needs each sequential computation to have exactly one call site
(its live ranges are nested at that site); `flatten_call_graph` clones to get there.
"""

from __future__ import annotations

from ..errors import UnsupportedError
from ..ir import Computation, Instruction, Module, Opcode, clone_computation

# Opcodes whose called computations are executed as sequences of thunks.
SEQUENTIAL_CALLERS = frozenset({Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL})


def while_body(instr: Instruction) -> Computation:
    """The body of a while (XLA keeps it first among the called computations)."""
    return instr.called[0]


def while_condition(instr: Instruction) -> Computation:
    return instr.called[1]


def nested_sequences(instr: Instruction) -> list[Computation]:
    """The sequential computations an instruction runs, in timeline order (condition first)."""
    if instr.opcode == Opcode.WHILE:
        return [while_condition(instr), while_body(instr)]
    if instr.opcode in SEQUENTIAL_CALLERS:
        return list(instr.called)
    return []


class CallGraph:
    """The sequential computations of a module (entry first, callers before callees) and the
    one instruction that calls each of them."""

    def __init__(self, module: Module):
        if module.entry is None:
            raise UnsupportedError(f"module {module.name} has no entry computation")
        self.module = module
        self.entry = module.entry
        self.call_site: dict[Computation, Instruction] = {}
        self.sequential: list[Computation] = []
        self._visit(module.entry)

    def _visit(self, comp: Computation) -> None:
        self.sequential.append(comp)
        for instr in comp.instructions:
            for callee in nested_sequences(instr):
                if callee in self.call_site or callee is self.entry:
                    raise UnsupportedError(
                        f"computation {callee.name} is called from more than one place; "
                        f"run flatten_call_graph first")
                self.call_site[callee] = instr
                self._visit(callee)

    def is_sequential(self, comp: Computation) -> bool:
        return comp is self.entry or comp in self.call_site

    def caller_kind(self, comp: Computation) -> str:
        """'entry', 'while-condition', 'while-body', 'branch' or 'call'."""
        if comp is self.entry:
            return "entry"
        site = self.call_site[comp]
        if site.opcode == Opcode.WHILE:
            return "while-body" if while_body(site) is comp else "while-condition"
        return "branch" if site.opcode == Opcode.CONDITIONAL else "call"


def _sequential_uses(module: Module) -> dict[Computation, int]:
    counts: dict[Computation, int] = {}
    for comp in module.computation_post_order():
        for instr in comp.instructions:
            for callee in nested_sequences(instr):
                counts[callee] = counts.get(callee, 0) + 1
    return counts


def flatten_call_graph(module: Module) -> bool:
    """Clone sequential computations called from several places so each has one call site.

    Thread-local computations stay shared: they own no buffers. Returns whether it changed.
    """
    changed = False
    while True:
        counts = _sequential_uses(module)
        shared = [c for c in module.computation_post_order()[::-1] if counts.get(c, 0) > 1]
        if not shared:
            return changed
        _split_callers(module, shared[0])
        changed = True


def _split_callers(module: Module, comp: Computation) -> None:
    """Give every call site of `comp` but the first its own clone (callees stay shared until
    the next round clones them too)."""
    seen = False
    for caller in module.computation_post_order():
        for instr in caller.instructions:
            for slot, callee in enumerate(instr.called):
                if callee is not comp or instr.opcode not in SEQUENTIAL_CALLERS:
                    continue
                if not seen:
                    seen = True
                    continue
                clone = clone_computation(comp, keep_ids=False)
                module.add_computation(clone)
                # Keep "callees before callers": move the clone next to the original.
                module.computations.remove(clone)
                module.computations.insert(module.computations.index(comp), clone)
                instr.called[slot] = clone
