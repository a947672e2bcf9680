"""Call inlining: replaces every `call` with the body of the called computation."""

from __future__ import annotations

from ..ir import Computation, Instruction, Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass


def inline_call(call: Instruction) -> None:
    """Copy the callee's instructions into the caller in place of `call`."""
    caller = call.parent
    callee = call.called[0]
    mapping: dict[int, Instruction] = {}
    for instr in callee.post_order():
        if instr.opcode == Opcode.PARAMETER:
            mapping[id(instr)] = call.operands[instr.attrs.parameter_number]
            continue
        new = Instruction(instr.opcode, instr.shape, [mapping[id(o)] for o in instr.operands],
                          name=instr.name, called=list(instr.called), attrs=instr.attrs,
                          metadata=instr.metadata)
        caller.add(new)
        mapping[id(instr)] = new
        for pred in instr.control_predecessors:
            if id(pred) in mapping:
                mapping[id(pred)].add_control_dependency(new)
    result = mapping[id(callee.root)]
    call.replace_all_uses_with(result)
    for pred in list(call.control_predecessors):
        if pred is not result:
            pred.add_control_dependency(result)
    call.drop_all_control_deps()
    if call is not caller.root:
        caller.remove(call)


@register_pass(aliases=("inline",))
@dataclass
class CallInliner(Pass):
    """Inlines every `call` instruction, flattening the call graph.

    Assumes: a valid module. Guarantees: no `call` instructions remain; callees that become
    unreachable are removed; instruction order stays a valid post order.
    """

    name = "call-inliner"

    def run(self, module: Module) -> bool:
        changed = False
        # Callers after callees: inlining bottom-up makes every callee call-free first.
        for comp in module.computation_post_order():
            calls = [i for i in comp.post_order() if i.opcode == Opcode.CALL]
            for call in calls:
                inline_call(call)
                changed = True
            if calls:
                _reorder(comp)
        if changed:
            live = {id(c) for c in module.computation_post_order()}
            for comp in [c for c in module.computations if id(c) not in live]:
                module.remove_computation(comp)
        return changed


def _reorder(comp: Computation) -> None:
    """Restore a post order in the instruction list (inlined code was appended at the end)."""
    comp.instructions[:] = comp.post_order()
