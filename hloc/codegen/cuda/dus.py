"""In-place dynamic-update-slice: when the output is the operand's buffer, write only the
update window (one thread per update element) instead of the whole array.

Only when the update and start indices do not read the operand being overwritten (else no
thread may overwrite what another still reads; the loop kernel's whole-array form is used,
and the buffer assignment never shares such buffers anyway).

A fusion from update-fusion also outputs the value the update copies (through reshapes):
each thread computes that element once, stores it to the value's output and into the
updated buffer.
"""

from __future__ import annotations

from ...ir import Instruction, Opcode
from ..elemental.indexing import clamped_starts, source_index
from ..elemental.memory import store_element
from ..roots import copied_item, reads
from .epilogue import find_core
from .kernel import KernelBuild, variant
from .loop import loop_launch, physical_index
from .parts import ITEM_PLANNERS, Part, PlanContext, plans


def _target_parameter(pc: PlanContext, instr: Instruction) -> int | None:
    operand = instr.operands[0]
    if pc.instr.opcode != Opcode.FUSION:
        return 0
    return operand.attrs.parameter_number if operand.opcode == Opcode.PARAMETER else None


@plans(Opcode.DYNAMIC_UPDATE_SLICE)
def plan_dus(pc: PlanContext, k: int) -> list[Part] | None:
    item = pc.items[k]
    instr = item.instr
    if instr.opcode != Opcode.DYNAMIC_UPDATE_SLICE:
        return None
    param = _target_parameter(pc, instr)
    if param is None or not pc.aliased(item.outputs[0], param):
        return None
    update = instr.operands[1].shape
    launch = loop_launch(max(1, update.num_elements), 1, pc.target)
    if pc.instr.opcode == Opcode.FUSION and any(reads(o, instr.operands[0])
                                                for o in instr.operands[1:]):
        # Buffer assignment never aliases such a fusion (its parameter has other users).
        return None
    return [Part("dus.inplace", (k, *_copied(pc, k)), launch, late=True)]


def _copied(pc: PlanContext, k: int) -> tuple[int, ...]:
    """The item this update copies, when no special kernel wants it (`copied_item`)."""
    j = copied_item(pc.items, k)
    if j is None:
        return ()
    source = pc.items[j].instr
    core = find_core(source) or source  # as plan_parts picks the item's planner
    return () if ITEM_PLANNERS.get(core.opcode) is not None else (j,)


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
    copied = kb.items()[1:]

    def body(item, update, index):
        value = None
        for other in copied:  # the value the update copies: computed once, stored twice
            at = source_index(kb.ctx, item.instr.operands[1], other.instr, index)
            value = kb.gen(other.instr)(at)
            (k,) = other.outputs
            store_element(kb.ctx, kb.output_shapes[k], kb.outputs[k], at, value)
        if value is None:
            value = kb.gen(item.instr.operands[1])(index)
        out = item.outputs[0]
        store_element(kb.ctx, kb.output_shapes[out], kb.outputs[out],
                      _destination(kb, item, index), value)

    _each_update_element(kb, body)
