"""Multi-output (sibling) fusion: fusions that read the same operand become one kernel.

Two loop fusions over the same shape, or two reductions of the same input shape over the same
dimensions, that both read a large operand compute their outputs in one pass over it (one kernel
launch, one read of the operand). The merged fusion returns a tuple; users read their value
through get-tuple-element.

Merging two siblings is only legal when neither depends on the other. That is checked by a
backward search bounded by post-order positions; positions go stale around every merge, so a
sweep defers any candidate pair whose position window overlaps an earlier merge of the same
sweep (no path can then run through a merged fusion), and the next sweep recomputes them.
"""

from __future__ import annotations

from ...ir import Computation, Instruction, Module, Opcode
from ...util.record import dataclass
from ..base import Pass, option, register_pass
from .build import as_fusion, fuse_each, fusion_size, merge_fusions
from .cost import can_root_fusion, depends_on, producer_class

Op = Opcode
_MAX_GROUP = 16  # siblings tried per operand and shape: keeps a sweep linear


@register_pass
@dataclass
class MultiOutputFusion(Pass):
    """Merges sibling loop/input fusions (and unfused elementwise ops and reduces) that read
    the same array operand into one multi-output fusion with a tuple root.

    Assumes: a valid module, normally after `fusion`. Guarantees: same values; only siblings
    with the same iteration space (equal loop shapes, or reductions of equal input shape over
    equal dimensions) merge; no cycles (neither sibling reaches the other); kOutput fusions and
    side-effecting ops are left alone; merged fusions hold at most `max-ops` instructions.
    """

    name = "multi-output-fusion"
    max_ops: int = option(256, minimum=1)
    max_sweeps: int = option(8, minimum=1)

    def run(self, module: Module) -> bool:
        return fuse_each(module, self._sweeps)

    def _sweeps(self, comp: Computation) -> bool:
        merged = False
        for _ in range(self.max_sweeps):
            if not _sweep(comp, self.max_ops):
                break
            merged = True
        return merged


# ---- candidates ------------------------------------------------------------------------------
def _root_of(instr: Instruction) -> Instruction:
    if instr.opcode != Op.FUSION:
        return instr
    root = instr.fused_computation().root
    return root.operands[0] if root.opcode == Op.TUPLE else root


def iteration_key(instr: Instruction):
    """What a kernel computing `instr` loops over, or None if it cannot take part."""
    if instr.opcode == Op.FUSION:
        if instr.attrs.fusion_kind not in ("kLoop", "kInput"):
            return None
    elif not can_root_fusion(instr) or producer_class(instr) == "index":
        return None
    root = _root_of(instr)
    if root.opcode == Op.REDUCE:
        return ("reduce", root.operands[0].shape.dims, tuple(root.dimensions))
    if root.shape.is_array and root.opcode != Op.REDUCE_WINDOW:
        return ("loop", root.shape.dims)
    return None


def _worth_sharing(operand: Instruction) -> bool:
    """Reading the operand once instead of twice matters: a real array, not a scalar."""
    return operand.shape.is_array and operand.shape.num_elements > 1 \
        and operand.opcode != Op.CONSTANT


# ---- one sweep -------------------------------------------------------------------------------
class _Sweep:
    def __init__(self, comp: Computation, max_ops: int):
        self.comp = comp
        self.max_ops = max_ops
        self.order = comp.post_order()
        self.pos = {id(i): n for n, i in enumerate(self.order)}
        self.windows: list[tuple[int, int]] = []
        self.dirty: set[int] = set()

    def overlaps(self, lo: int, hi: int) -> bool:
        return any(not (hi < a or b < lo) for a, b in self.windows)

    def reaches(self, early: Instruction, late: Instruction) -> bool:
        """Whether `late` depends on `early` (conservatively True when the search gives up)."""
        floor = self.pos[id(early)]
        # Instructions made by this sweep have no position: never prune them.
        return depends_on(late, early, lambda i: self.pos.get(id(i), floor) < floor)

    def mergeable(self, a: Instruction, b: Instruction) -> bool:
        if id(a) in self.dirty or id(b) in self.dirty or fusion_size(a) + fusion_size(b) > self.max_ops:
            return False
        pa, pb = sorted((self.pos[id(a)], self.pos[id(b)]))
        if self.overlaps(pa, pb):
            return False
        early, late = (a, b) if self.pos[id(a)] < self.pos[id(b)] else (b, a)
        return not self.reaches(early, late)

    def merge(self, a: Instruction, b: Instruction) -> None:
        lo, hi = sorted((self.pos[id(a)], self.pos[id(b)]))
        self.windows.append((lo, hi))
        fusions = [as_fusion(self.comp, x) for x in (a, b)]
        kind = "kInput" if iteration_key(a)[0] == "reduce" else "kLoop"
        merged = merge_fusions(self.comp, fusions, kind)
        self.dirty.add(id(merged))
        self.pos[id(merged)] = hi

    def candidates(self, operand: Instruction) -> list[Instruction]:
        out = [u for u in dict.fromkeys(operand.users)
               if u.parent is self.comp and id(u) not in self.dirty
               and not u.control_predecessors and not u.control_successors
               and iteration_key(u) is not None]
        return sorted(out, key=lambda u: self.pos[id(u)])

    def run(self) -> bool:
        changed = False
        for operand in self.order:
            if operand.parent is not self.comp or not _worth_sharing(operand):
                continue
            changed |= self.merge_users(operand)
        return changed

    def merge_users(self, operand: Instruction) -> bool:
        groups: dict[object, list[Instruction]] = {}
        for u in self.candidates(operand):
            groups.setdefault(iteration_key(u), []).append(u)
        for users in groups.values():
            users = users[:_MAX_GROUP]
            for i, a in enumerate(users):
                for b in users[i + 1:]:
                    if self.mergeable(a, b):
                        self.merge(a, b)
                        return True
        return False


def _sweep(comp: Computation, max_ops: int) -> bool:
    return _Sweep(comp, max_ops).run()
