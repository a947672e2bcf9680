"""Which slices of a thunk program must be exactly the byte size of which HLO shape.

Kept apart from validate.py so the rules read as a table. Both the CPU ThunkProgram and the
GPU GpuProgram are handled by the names of their fields (no dependence on thunk methods).
"""

from __future__ import annotations

from ..ir import Opcode, Shape
from ..thunks.thunks import Gemm


def _parameter(number: int, index):
    def shape_of(entry, instructions):
        if not 0 <= number < len(entry.parameters):
            raise IndexError(number)
        return entry.parameter(number).shape.subshape(tuple(index))
    return shape_of


def _result(index):
    def shape_of(entry, instructions):
        return entry.root.shape.subshape(tuple(index))
    return shape_of


def _constant(name: str):
    def shape_of(entry, instructions):
        instr = instructions[name]
        if instr.opcode != Opcode.CONSTANT:
            raise KeyError(name)
        return instr.shape
    return shape_of


def entry_slices(program):
    """(shape_of(entry, instructions), slice, where) for parameter, result, constant slices."""
    for number, index, s in getattr(program, "parameters", ()):
        yield _parameter(number, index), s, f"parameter {number} {list(index)}"
    for index, s in getattr(program, "outputs", ()):
        yield _result(index), s, f"output {list(index)}"
    for name, s in getattr(program, "constants", ()):
        yield _constant(name), s, f"constant %{name}"
    for up in getattr(program, "host_to_device", ()):
        if up.constant:
            yield _constant(up.constant), up.slice, f"upload of %{up.constant}"
        else:
            yield _parameter(up.number, up.index), up.slice, f"upload of parameter {up.number}"
    for down in getattr(program, "device_to_host", ()):
        yield _result(down.index), down.slice, f"download {list(down.index)}"


def _array_leaves(shape) -> list:
    return [leaf for _, leaf in shape.leaves()]


def thunk_outputs(thunk, instr):
    """(shape, slice, where) for the slices a thunk writes whose size its instruction fixes.

    Only thunks named after an instruction are checked; a kernel writes one slice per array
    leaf of its instruction's result; gemm, copy and memset write the whole result."""
    if instr is None:
        return
    where = f"{thunk.kind} %{thunk.name}"
    outputs = getattr(thunk, "outputs", None)
    if thunk.kind == "kernel" and outputs is not None:
        leaves = _array_leaves(instr.shape)
        if len(leaves) == len(outputs):
            for leaf, s in zip(leaves, outputs, strict=True):
                yield leaf, s, f"{where} output"
        return
    if isinstance(thunk, Gemm) and instr.opcode == Opcode.DOT:  # not the GPU's GemmLaunch
        yield instr.shape, thunk.output, f"{where} output"
        yield instr.operands[0].shape, thunk.lhs, f"{where} lhs"
        yield instr.operands[1].shape, thunk.rhs, f"{where} rhs"
        return
    if thunk.kind in ("copy", "memset") and instr.shape.is_array:
        yield instr.shape, thunk.destination, f"{where} destination"
    yield from control_reads(thunk, instr, where)


def control_reads(thunk, instr, where: str):
    """The scalar a while loop or conditional reads to decide (on the host, or in the kernel
    that sets a conditional graph node): a while's predicate is a pred; a conditional's
    selector is its instruction's operand 0, and of the type the thunk says (a pred, else an
    s32), so a thunk claiming the other type fails one of the two sizes."""
    if thunk.kind == "while" and instr.opcode == Opcode.WHILE:
        yield Shape.scalar("pred"), thunk.predicate, f"{where} predicate"
    elif thunk.kind == "conditional" and instr.opcode == Opcode.CONDITIONAL:
        yield instr.operands[0].shape, thunk.selector, f"{where} selector"
        claimed = Shape.scalar("pred" if thunk.selector_is_pred else "s32")
        yield claimed, thunk.selector, f"{where} selector (as the thunk reads it)"
