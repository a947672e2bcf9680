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
    copied: tuple[int, ...] = ()
    j = copied_item(pc.items, k)
    if j is not None:
        other = special_parts(pc, j)
        if other is None:
            copied = (j,)  # a loop item: this kernel computes it, once
        elif any(k in p.items for p in other):
            return []  # the copied item's kernel writes the update too
    update = pc.items[k].instr.operands[1].shape
    launch = loop_launch(max(1, update.num_elements), 1, pc.target)
    return [Part("dus.inplace", (k, *copied), launch, late=True)]


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
