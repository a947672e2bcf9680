"""Building fusion instructions: turn a cluster of instructions into a fused computation, and
keep instruction and computation lists in the orders printers and protos expect.

A fusion's called computation has one parameter per distinct outside operand (numbered in the
order the cluster first reads them); its root computes the replaced instruction's value. Members
that other instructions still use stay in the caller (they were duplicated, not moved).
"""

from __future__ import annotations

from collections.abc import Callable

from ...ir import Attrs, Computation, Instruction, Module, Opcode, Shape
from ...ir.computation import dfs_post_order
from ..rewrite import detach, drop_detached, update_schedule
from .cost import producer_class, program_computations

Op = Opcode


def fusion_kind(members: list[Instruction], root: Instruction) -> str:
    """kInput for a reduction root, kOutput when a dot/convolution is inside, else kLoop."""
    if root.opcode == Op.REDUCE:
        return "kInput"
    if any(m.opcode in (Op.DOT, Op.CONVOLUTION) for m in members):
        return "kOutput"
    return "kLoop"


def topological(members: dict[int, Instruction], root: Instruction) -> list[Instruction]:
    """The members, operands before users (a DFS restricted to the cluster)."""
    return dfs_post_order([root], lambda i: [o for o in i.operands if id(o) in members])


class _FusedBuilder:
    """Copies instructions into a new fused computation, making parameters for outside values."""

    def __init__(self, name: str):
        self.comp = Computation(name, is_fusion=True)
        self.outside: list[Instruction] = []
        self.mapping: dict[int, Instruction] = {}

    def value(self, instr: Instruction) -> Instruction:
        """The in-fusion value of `instr`: its copy, or a parameter standing for it."""
        found = self.mapping.get(id(instr))
        if found is not None:
            return found
        n = len(self.outside)
        param = self.comp.add(Instruction(Op.PARAMETER, instr.shape, name=f"param_{n}",
                                          attrs=Attrs(parameter_number=n)))
        self.outside.append(instr)
        self.mapping[id(instr)] = param
        return param

    def copy(self, instr: Instruction, operands=None) -> Instruction:
        ops = [self.value(o) for o in instr.operands] if operands is None else operands
        new = Instruction(instr.opcode, instr.shape, ops, name=instr.name, called=instr.called,
                          attrs=instr.attrs, metadata=instr.metadata)
        self.comp.add(new)
        self.mapping[id(instr)] = new
        return new


def _new_fusion(comp: Computation, builder: _FusedBuilder, root_value: Instruction, kind: str,
                like: Instruction) -> Instruction:
    """Add the fused computation and a fusion instruction calling it to `comp`'s module."""
    module = comp.parent
    builder.comp.root = root_value
    fusion = Instruction(Op.FUSION, root_value.shape, builder.outside, name="fusion",
                         called=[builder.comp], attrs=Attrs(fusion_kind=kind),
                         metadata=like.metadata)
    comp.add(fusion)
    suffix = fusion.name[len("fusion"):]
    builder.comp.name = f"fused_computation{suffix}"
    module.add_computation(builder.comp)
    return fusion


def detach_dead(comp: Computation, members_users_first: list[Instruction]) -> None:
    """Unlink members nothing reads any more; their list slots go in `restore_orders` (one list
    rebuild per computation: removing them one by one would make fusion quadratic)."""
    for m in members_users_first:
        if m.parent is comp and not m.users and not m.is_root:
            detach(m)


def fuse_cluster(comp: Computation, root: Instruction, members: dict[int, Instruction],
                 kind: str | None = None) -> Instruction:
    """Replace `root` by a fusion computing it from the cluster `members` (root included)."""
    order = topological(members, root)
    builder = _FusedBuilder("fused_computation")
    for m in order:
        builder.copy(m)
    kind = kind or fusion_kind(order, root)
    fusion = _new_fusion(comp, builder, builder.mapping[id(root)], kind, root)
    root.replace_all_uses_with(fusion)
    detach_dead(comp, list(reversed(order)))
    return fusion


def as_fusion(comp: Computation, instr: Instruction) -> Instruction:
    """`instr` itself if a fusion, else a new fusion of it and its scalar constants."""
    if instr.opcode == Op.FUSION:
        return instr
    members = {id(o): o for o in instr.operands if producer_class(o) == "constant"}
    members[id(instr)] = instr
    return fuse_cluster(comp, instr, members)


def fusion_size(instr: Instruction) -> int:
    """Instructions a kernel computing `instr` holds (a fusion's, parameters left out)."""
    if instr.opcode == Op.FUSION:
        return sum(1 for i in instr.fused_computation().instructions
                   if i.opcode != Op.PARAMETER)
    return 1


# ---- multi-output fusions -----------------------------------------------------------------
def fusion_outputs(fusion: Instruction) -> int:
    """How many values a fusion produces (tuple elements, or 1)."""
    return len(fusion.shape.tuple_shapes) if fusion.shape.is_tuple else 1


def _inline_outputs(builder: _FusedBuilder, fusion: Instruction) -> list[Instruction]:
    """Copy a fusion's computation into the builder; the copied output values."""
    inner = fusion.fused_computation()
    tuple_root = inner.root if inner.root.opcode == Op.TUPLE else None
    local: dict[int, Instruction] = {}
    for instr in inner.post_order():
        if instr is tuple_root:
            continue  # the merged fusion gets one tuple of every output
        if instr.opcode == Op.PARAMETER:
            local[id(instr)] = builder.value(fusion.operands[instr.attrs.parameter_number])
            continue
        new = Instruction(instr.opcode, instr.shape, [local[id(o)] for o in instr.operands],
                          name=instr.name, called=instr.called, attrs=instr.attrs,
                          metadata=instr.metadata)
        builder.comp.add(new)
        local[id(instr)] = new
    if tuple_root is not None:
        return [local[id(o)] for o in tuple_root.operands]
    root = local[id(inner.root)]
    if not root.shape.is_tuple:
        return [root]
    return [builder.comp.add(Instruction(Op.GET_TUPLE_ELEMENT, s, [root],
                                         attrs=Attrs(tuple_index=k)))
            for k, s in enumerate(root.shape.tuple_shapes)]


def _redirect(comp: Computation, old: Instruction, merged: Instruction, offset: int) -> None:
    """Point the users of `old` (whose outputs now sit at `offset` in `merged`) at `merged`."""
    def element(k: int) -> Instruction:
        shape = merged.shape.tuple_shapes[offset + k]
        return comp.add(Instruction(Op.GET_TUPLE_ELEMENT, shape, [merged],
                                    attrs=Attrs(tuple_index=offset + k)))

    if not old.shape.is_tuple:
        old.replace_all_uses_with(element(0))
        return
    for user in list(old.users):
        if user.opcode == Op.GET_TUPLE_ELEMENT:
            user.replace_all_uses_with(element(user.attrs.tuple_index))
            comp.remove(user)
    if old.users or old.is_root:
        parts = [element(k) for k in range(fusion_outputs(old))]
        view = comp.add(Instruction(Op.TUPLE, old.shape, parts))
        old.replace_all_uses_with(view)


def merge_fusions(comp: Computation, fusions: list[Instruction], kind: str) -> Instruction:
    """One multi-output fusion computing every output of `fusions` (which share no path)."""
    builder = _FusedBuilder("fused_computation")
    outputs: list[Instruction] = []
    for f in fusions:
        outputs += _inline_outputs(builder, f)
    root = builder.comp.add(Instruction(Op.TUPLE, Shape.tuple_of(o.shape for o in outputs),
                                        outputs))
    merged = _new_fusion(comp, builder, root, kind, fusions[0])
    offset = 0
    for f in fusions:
        _redirect(comp, f, merged, offset)
        offset += fusion_outputs(f)
        comp.remove(f)
        # A fused computation has exactly one caller (HLO rule), so it is dead now.
        comp.parent.remove_computation(f.fused_computation())
    return merged


def merge_into_consumer(comp: Computation, producer: Instruction,
                        consumer: Instruction) -> Instruction:
    """One multi-output fusion computing `consumer`'s outputs and then `producer`'s (both
    fusions; the producer has one output), the consumer reading the producer's value inside
    instead of its buffer. Users of either read the merged fusion's tuple elements."""
    builder = _FusedBuilder("fused_computation")
    produced = _inline_outputs(builder, producer)
    (builder.mapping[id(producer)],) = produced
    consumed = _inline_outputs(builder, consumer)
    outputs = consumed + produced
    root = builder.comp.add(Instruction(Op.TUPLE, Shape.tuple_of(o.shape for o in outputs),
                                        outputs))
    kind = "kOutput" if producer.attrs.fusion_kind == "kOutput" else "kLoop"
    merged = _new_fusion(comp, builder, root, kind, consumer)
    for old, offset in ((consumer, 0), (producer, len(consumed))):
        _redirect(comp, old, merged, offset)
        comp.remove(old)
        comp.parent.remove_computation(old.fused_computation())
    return merged


# ---- orders ----------------------------------------------------------------------------------
def fuse_each(module: Module, fuse: Callable[[Computation], bool]) -> bool:
    """`fuse` on every program computation (cost.program_computations), then the changed ones'
    instruction lists and the module's computations back in order; whether any changed."""
    changed = [comp for comp in program_computations(module) if fuse(comp)]
    if changed:
        restore_orders(module, changed)
    return bool(changed)


def restore_orders(module: Module, changed: list[Computation]) -> None:
    """Instruction lists back in def-before-use order; computations callees first."""
    for comp in changed:
        drop_detached(comp)
        comp.instructions[:] = comp.post_order()
    order = dfs_post_order(list(module.computations), lambda c: c.called_computations())
    owned = {id(c) for c in module.computations}
    module.computations[:] = [c for c in order if id(c) in owned]
    update_schedule(module)
