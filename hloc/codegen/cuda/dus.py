"""In-place dynamic-update-slice: when the output is the operand's buffer, write only the
update window (one thread per update element) instead of the whole array.

Only when the update and start indices do not read the operand being overwritten (else no
thread may overwrite what another still reads; the loop kernel's whole-array form is used,
and the buffer assignment never shares such buffers anyway).
"""

from __future__ import annotations

from ...ir import Instruction, Opcode
from ..elemental.indexing import clamped_starts
from ..elemental.memory import store_element
from .kernel import KernelBuild, variant
from .loop import loop_launch, physical_index
from .parts import Part, PlanContext, plans


def _target_parameter(pc: PlanContext, instr: Instruction) -> int | None:
    operand = instr.operands[0]
    if pc.instr.opcode != Opcode.FUSION:
        return 0
    return operand.attrs.parameter_number if operand.opcode == Opcode.PARAMETER else None


def _reads(instr: Instruction, target: Instruction) -> bool:
    stack, seen = list(instr.operands[1:]), set()
    while stack:
        x = stack.pop()
        if x is target:
            return True
        if id(x) not in seen:
            seen.add(id(x))
            stack.extend(x.operands)
    return False


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
    if pc.instr.opcode == Opcode.FUSION and _reads(instr, instr.operands[0]):
        # Buffer assignment never aliases such a fusion (its parameter has other users).
        return None
    return [Part("dus.inplace", (k,), launch, late=True)]


def _each_update_element(kb: KernelBuild, body) -> None:
    (item,) = kb.items()
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
    def body(item, update, index):
        value = kb.gen(item.instr.operands[1])(index)
        out = item.outputs[0]
        store_element(kb.ctx, kb.output_shapes[out], kb.outputs[out],
                      _destination(kb, item, index), value)

    _each_update_element(kb, body)
