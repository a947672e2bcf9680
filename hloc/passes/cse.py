"""Common subexpression elimination."""

from __future__ import annotations

from ..ir import Computation, Instruction, Module, Opcode
from ..util.record import dataclass
from .base import Pass, register_pass
from .rewrite import detach, drop_detached, has_side_effects, update_schedule


class _Fingerprints:
    """Structural keys for computations: equal keys mean the computations compute the same
    function (same ops, attributes, shapes and wiring), whatever their names. Keys are small
    ints (interned structures) so instruction keys stay cheap to hash."""

    def __init__(self) -> None:
        self._memo: dict[int, int] = {}
        self._interned: dict[tuple, int] = {}

    def of(self, comp: Computation) -> int:
        key = id(comp)
        if key not in self._memo:
            self._memo[key] = -1  # HLO forbids recursion; this only avoids looping on it
            structure = self._compute(comp)
            self._memo[key] = self._interned.setdefault(structure, len(self._interned))
        return self._memo[key]

    def _compute(self, comp: Computation) -> tuple:
        order = comp.post_order()
        position = {id(instr): n for n, instr in enumerate(order)}
        body = tuple(
            (i.opcode, i.shape, i.attrs, tuple(self.of(c) for c in i.called),
             tuple(position[id(o)] for o in i.operands))
            for i in order)
        return body, position.get(id(comp.root), -1)


def _mergeable(instr: Instruction, effects: dict[int, bool]) -> bool:
    if instr.opcode == Opcode.PARAMETER or instr.control_predecessors or instr.control_successors:
        return False
    return not has_side_effects(instr, effects)


@register_pass
@dataclass
class CommonSubexpressionElimination(Pass):
    """Merges instructions that compute the same value: same opcode, shape, attributes (so equal
    constants merge) and operands, and structurally equal called computations.

    Assumes: a valid module. Guarantees: side-effecting instructions (and anything calling
    them), parameters and instructions with control dependencies are never merged; the first
    instruction in post order survives, so every use still follows its definition.
    """

    name = "cse"

    def run(self, module: Module) -> bool:
        prints = _Fingerprints()
        effects: dict[int, bool] = {}
        changed = False
        # Callees first, so a caller compares callees that are already deduplicated.
        order = module.computation_post_order()
        reachable = {id(c) for c in order}
        order += [c for c in module.computations if id(c) not in reachable]
        for comp in order:
            changed |= self._run_computation(comp, prints, effects)
        if changed:
            update_schedule(module)
        return changed

    def _run_computation(self, comp: Computation, prints: _Fingerprints,
                         effects: dict[int, bool]) -> bool:
        # Keys use each operand's surviving representative, so duplicates are found in one
        # post-order sweep without rewiring them first; only survivors get rewired after.
        canon: dict[int, Instruction] = {}
        seen: dict[tuple, Instruction] = {}
        merged: list[Instruction] = []
        for instr in comp.post_order():
            if not _mergeable(instr, effects):
                continue
            key = (instr.opcode, instr.shape, instr.attrs,
                   tuple(prints.of(c) for c in instr.called),
                   tuple(id(canon.get(id(o), o)) for o in instr.operands))
            first = seen.setdefault(key, instr)
            if first is not instr:
                canon[id(instr)] = first
                merged.append(instr)
        if not merged:
            return False
        _rewire(comp, canon)
        for instr in reversed(merged):  # users (later in post order) go first
            detach(instr)
        drop_detached(comp)
        return True


def _rewire(comp: Computation, canon: dict[int, Instruction]) -> None:
    """Point every surviving instruction (and the root) at the representatives."""
    for instr in comp.instructions:
        if id(instr) in canon:
            continue
        for op in dict.fromkeys(instr.operands):
            if id(op) in canon:
                instr.replace_operand_with(op, canon[id(op)])
    if comp.root is not None and id(comp.root) in canon:
        comp.root = canon[id(comp.root)]
