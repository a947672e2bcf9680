"""Conditional simplification: a conditional whose branch is known becomes that branch's code."""

from __future__ import annotations

from ..ir import Instruction, Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass
from .call_inliner import inline_call
from .rewrite import splat_value, update_schedule


def chosen_branch(cond: Instruction) -> int | None:
    """The branch a conditional always takes, or None when it depends on run-time data.

    A pred selects branch 0 when true and 1 when false; an s32 index out of range selects the
    last branch (XLA's semantics).
    """
    n = len(cond.called)
    if n == 1:
        return 0
    selector = cond.operands[0]
    if selector.opcode != Opcode.CONSTANT:
        return None
    value = splat_value(selector)
    if value is None:
        return None
    if selector.shape.dtype.kind == "pred":
        return 0 if bool(value) else 1
    index = int(value)
    return index if 0 <= index < n else n - 1


def inline_branch(cond: Instruction, branch: int) -> None:
    """Replace `cond` by a call of the branch computation, then inline that call."""
    comp = cond.parent
    call = Instruction(Opcode.CALL, cond.shape, [cond.operands[branch + 1]],
                       called=[cond.called[branch]], metadata=cond.metadata)
    comp.add(call)
    cond.replace_all_uses_with(call)
    comp.remove(cond)
    inline_call(call)


@register_pass
@dataclass
class ConditionalSimplifier(Pass):
    """Inlines the taken branch of conditionals with a constant predicate / branch index or a
    single branch.

    Assumes: a valid module. Guarantees: the branch runs exactly once as before (side effects
    included); conditionals with control dependencies are left alone; computations that become
    unreachable are removed.
    """

    name = "conditional-simplifier"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in module.computation_post_order():
            targets = []
            for instr in comp.post_order():
                if instr.opcode != Opcode.CONDITIONAL:
                    continue
                if instr.control_predecessors or instr.control_successors:
                    continue
                branch = chosen_branch(instr)
                if branch is not None:
                    targets.append((instr, branch))
            for instr, branch in targets:
                inline_branch(instr, branch)
            if targets:
                comp.instructions[:] = comp.post_order()
                changed = True
        if changed:
            remove_unreachable_computations(module)
            update_schedule(module)
        return changed


def remove_unreachable_computations(module: Module) -> None:
    live = {id(c) for c in module.computation_post_order()}
    for comp in [c for c in module.computations if id(c) not in live]:
        module.remove_computation(comp)
