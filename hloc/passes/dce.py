"""Dead code elimination."""

from __future__ import annotations

from ..ir import Module, Opcode
from ..ir.opcodes import SIDE_EFFECTING
from ..util.record import dataclass
from .base import Pass, register_pass


def _removable(instr) -> bool:
    if instr.users or instr.is_root or instr.control_successors:
        return False
    if instr.opcode == Opcode.PARAMETER or instr.opcode in SIDE_EFFECTING:
        return False
    if instr.opcode == Opcode.CUSTOM_CALL and instr.attrs.custom_call_has_side_effect:
        return False
    return True


@register_pass
@dataclass
class DeadCodeElimination(Pass):
    """Removes instructions whose results are unused and computations nothing calls.

    Assumes: a valid module. Guarantees: parameters, roots and side-effecting ops (infeed,
    outfeed, send/recv, collectives, rng, side-effecting custom-calls) are kept.
    """

    name = "dce"
    remove_computations: bool = True

    def run(self, module: Module) -> bool:
        changed = False
        for comp in module.computations:
            # Reverse post order: users before operands, so chains die in one sweep.
            for instr in reversed(comp.post_order()):
                if _removable(instr):
                    comp.remove(instr)
                    changed = True
        if self.remove_computations:
            live = {id(c) for c in module.computation_post_order()}
            for comp in [c for c in module.computations if id(c) not in live]:
                module.remove_computation(comp)
                changed = True
        return changed
