"""In-place dynamic-update-slice: when the output is the operand's buffer, write only the
update window (one thread per update element) instead of the whole array.

Only when the update and start indices do not read the operand being overwritten (else no
thread may overwrite what another still reads; the loop kernel's whole-array form is used,
and the buffer assignment never shares such buffers anyway).

A fusion from update-fusion also outputs the value the update copies (through reshapes):
each thread computes that element once, stores it to the value's output and into the
updated buffer. It computes the fusion's other elementwise outputs of that value's shape at
the same index (roots.pass_items), all values before any store.
"""

from __future__ import annotations

from ...analysis.sharing import update_source
from ...ir import Instruction, Opcode
from ..elemental.indexing import clamped_starts, source_index
from ..elemental.memory import store_element
from ..roots import copied_item, pass_items, reads, root_items
from .kernel import KernelBuild, variant
from .loop import loop_launch, physical_index
from .parts import Part, PlanContext, plans, special_parts


def _target_parameter(pc: PlanContext, instr: Instruction) -> int | None:
    operand = instr.operands[0]
    if pc.instr.opcode != Opcode.FUSION:
        return 0
    return operand.attrs.parameter_number if operand.opcode == Opcode.PARAMETER else None


def in_place(pc: PlanContext, k: int) -> bool:
    """Item `k` is a dynamic-update-slice whose output is its operand's very buffer, and whose
    update and starts do not read that operand: its kernel writes only the update window."""
    instr = pc.items[k].instr
    if instr.opcode != Opcode.DYNAMIC_UPDATE_SLICE:
        return False
    param = _target_parameter(pc, instr)
    if param is None or not pc.aliased(pc.items[k].outputs[0], param):
        return False
    # Buffer assignment never aliases a fusion whose update reads the target (its parameter
    # has other users).
    return pc.instr.opcode != Opcode.FUSION or not any(reads(o, instr.operands[0])
                                                      for o in instr.operands[1:])


def update_of(pc: PlanContext, k: int) -> int | None:
    """The in-place update item that copies item `k`'s value, for `k`'s own kernel to write
    too (the GEMM's store does), or None."""
    for j in range(len(pc.items)):
        if copied_item(pc.items, j) == k and in_place(pc, j):
            return j
    return None


@plans(Opcode.DYNAMIC_UPDATE_SLICE)
def plan_dus(pc: PlanContext, k: int) -> list[Part] | None:
    if not in_place(pc, k):
        return None
    j = copied_item(pc.items, k)
    if j is not None:
        other = special_parts(pc, j)
        if other is not None and any(k in p.items for p in other):
            return []  # the copied item's kernel writes the update too
    # Loop items only: this kernel computes each once (the copy first, when it is one).
    computed = tuple(i for i in pass_items(pc.items, k) if special_parts(pc, i) is None)
    update = pc.items[k].instr.operands[1].shape
    launch = loop_launch(max(1, update.num_elements), 1, pc.target)
    return [Part("dus.inplace", (k, *computed), launch, late=True)]


def _each_update_element(kb: KernelBuild, body) -> None:
    item = kb.items()[0]
    update = item.instr.operands[1].shape
    b = kb.b
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(max(1, update.num_elements)))):
        body(item, update, physical_index(kb, update, linear))


def _destination(kb: KernelBuild, item, index):
    instr = item.instr
    shape = kb.output_shapes[item.outputs[0]]
    starts = clamped_starts(kb.ctx, instr, [kb.gen(o) for o in instr.operands[2:]], shape.dims,
                            instr.operands[1].shape.dims)
    return [kb.b.add(s, i) for s, i in zip(starts, index, strict=True)]


@variant("dus.inplace")
def emit_inplace(kb: KernelBuild) -> None:
    items = kb.items()
    chosen = kb.recipe.items
    copies = len(chosen) > 1 and chosen[1] == copied_item(root_items(kb.comp), chosen[0])

    def body(item, update, index):
        # Every value first, then every store: an item may overwrite what another reads at
        # this index (roots.pass_items).
        stores = []
        update_operand = item.instr.operands[1]
        at = source_index(kb.ctx, update_operand, update_source(update_operand), index)
        for other in items[1:]:  # each of the update source's dims
            (k,) = other.outputs
            stores.append((kb.output_shapes[k], kb.outputs[k], at, kb.gen(other.instr)(at)))
        # The value the update copies: computed once, stored twice.
        value = stores[0][3] if copies else kb.gen(item.instr.operands[1])(index)
        for shape, buffer, at, v in stores:
            store_element(kb.ctx, shape, buffer, at, v)
        out = item.outputs[0]
        store_element(kb.ctx, kb.output_shapes[out], kb.outputs[out],
                      _destination(kb, item, index), value)

    _each_update_element(kb, body)
