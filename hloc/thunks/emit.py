"""Thunk emission: the scheduled module + buffer assignment -> a ThunkProgram.

One thunk per instruction of each sequential computation, in schedule order, except for
instructions that only name storage (parameter, constant, tuple, get-tuple-element, bitcast,
opt-barrier, add-dependency, domain, after-all): they need no work at run time. Emitters are
registered per opcode; everything without a specific emitter is a Kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..analysis import leaves, while_body, while_condition
from ..buffers.assignment import BufferAssignment, Slice
from ..ir import Computation, Instruction, Opcode, PrimitiveType
from ..ir.custom_calls import check_call
from ..registry import Registry
from .thunks import (
    Conditional,
    Convolution,
    Copy,
    CustomCall,
    Fft,
    Gemm,
    Kernel,
    Memset,
    Sequential,
    Sort,
    Thunk,
    ThunkProgram,
    While,
)
from .trip_count import known_trip_count

NO_THUNK = frozenset({Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT,
                      Opcode.BITCAST, Opcode.OPT_BARRIER, Opcode.ADD_DEPENDENCY, Opcode.DOMAIN,
                      Opcode.AFTER_ALL})


class Emitter:
    """Emission state: the assignment and the schedule as instruction lists."""

    def __init__(self, assignment: BufferAssignment, sequences: dict[Computation, list[Instruction]]):
        self.assignment = assignment
        self.sequences = sequences

    def operands(self, instr: Instruction) -> tuple[Slice, ...]:
        return tuple(s for op in instr.operands for _, s in self.assignment.leaf_slices(op))

    def outputs(self, instr: Instruction) -> tuple[Slice, ...]:
        return tuple(s for _, s in self.assignment.leaf_slices(instr))

    def slice(self, instr: Instruction) -> Slice:
        return self.assignment.slice(instr)

    def sequence(self, comp: Computation) -> tuple[Thunk, ...]:
        out = []
        for instr in self.sequences[comp]:
            if instr.opcode in NO_THUNK:
                continue
            out.append(EMITTERS.get(instr.opcode, _kernel)(self, instr))
        return tuple(out)


EmitFn = Callable[[Emitter, Instruction], Thunk]
# Opcodes without an entry become Kernel thunks.
EMITTERS: Registry[Opcode, EmitFn] = Registry("thunk emitter",
                                               modules=("hloc.thunks.emit_collectives",))
_emits = EMITTERS.register


def _kernel(e: Emitter, instr: Instruction) -> Thunk:
    fused = instr.called[0].name if instr.opcode == Opcode.FUSION else ""
    scratch = e.assignment.scratch_slice(instr)
    return Kernel(instr.name, instr.opcode.value, fused, e.operands(instr), e.outputs(instr),
                  () if scratch is None else (scratch,))


@_emits(Opcode.DOT)
def _dot(e: Emitter, instr: Instruction) -> Thunk:
    d = instr.attrs.dot_dnums
    lhs, rhs = (e.slice(op) for op in instr.operands[:2])
    return Gemm(instr.name, lhs, rhs, e.slice(instr), tuple(d.lhs_contracting_dimensions),
                tuple(d.rhs_contracting_dimensions), tuple(d.lhs_batch_dimensions),
                tuple(d.rhs_batch_dimensions))


@_emits(Opcode.CONVOLUTION)
def _convolution(e: Emitter, instr: Instruction) -> Thunk:
    return Convolution(instr.name, e.slice(instr.operands[0]), e.slice(instr.operands[1]),
                       e.slice(instr))


@_emits(Opcode.COPY)
def _copy(e: Emitter, instr: Instruction) -> Thunk:
    source = instr.operands[0]
    if instr.shape.is_array and source.shape.layout == instr.shape.layout:
        return Copy(instr.name, e.slice(source), e.slice(instr))
    return _kernel(e, instr)


@_emits(Opcode.BROADCAST)
def _broadcast(e: Emitter, instr: Instruction) -> Thunk:
    """A broadcast of a scalar constant whose bytes are all equal is a memset."""
    src = instr.operands[0]
    if src.opcode == Opcode.CONSTANT and src.shape.rank == 0 and src.shape.is_array:
        raw = src.literal.data
        if raw and raw == raw[:1] * len(raw) and src.shape.element_type != PrimitiveType.PRED:
            return Memset(instr.name, e.slice(instr), raw[0])
    return _kernel(e, instr)


@_emits(Opcode.WHILE)
def _while(e: Emitter, instr: Instruction) -> Thunk:
    cond = while_condition(instr)
    return While(instr.name, e.sequence(cond), e.sequence(while_body(instr)),
                 e.slice(cond.root), known_trip_count(instr))


@_emits(Opcode.CONDITIONAL)
def _conditional(e: Emitter, instr: Instruction) -> Thunk:
    selector = instr.operands[0]
    is_pred = selector.shape.element_type == PrimitiveType.PRED
    return Conditional(instr.name, e.slice(selector),
                       tuple(e.sequence(b) for b in instr.called), is_pred)


@_emits(Opcode.CALL)
def _call(e: Emitter, instr: Instruction) -> Thunk:
    return Sequential(instr.name, e.sequence(instr.called[0]))


@_emits(Opcode.SORT)
def _sort(e: Emitter, instr: Instruction) -> Thunk:
    return Sort(instr.name, e.operands(instr), e.outputs(instr), instr.called[0].name,
                instr.dimensions[0] if instr.dimensions else 0, bool(instr.attrs.is_stable))


@_emits(Opcode.FFT)
def _fft(e: Emitter, instr: Instruction) -> Thunk:
    return Fft(instr.name, e.slice(instr.operands[0]), e.slice(instr),
               int(instr.attrs.fft_type or 0), tuple(instr.attrs.fft_length or ()))


@_emits(Opcode.CUSTOM_CALL)
def _custom_call(e: Emitter, instr: Instruction) -> Thunk:
    a = instr.attrs
    check_call(instr)
    return CustomCall(instr.name, a.custom_call_target or "", e.operands(instr), e.outputs(instr),
                      int(a.custom_call_api_version or 0), a.backend_config or "")


def emit_program(assignment: BufferAssignment, sequences: dict[Computation, list[Instruction]]
                 ) -> ThunkProgram:
    """The thunk program of a scheduled, assigned module (streams are added separately)."""
    module = assignment.module
    entry = module.entry
    emitter = Emitter(assignment, sequences)
    df = assignment.dataflow
    params = tuple((p.attrs.parameter_number, index, assignment.value_slice(v))
                   for p in entry.parameters for index, v in leaves(df.tree(p)))
    outputs = tuple((index, assignment.value_slice(v)) for index, v in leaves(df.tree(entry.root)))
    constants = tuple((a.constant, Slice(a.index, 0, a.size))
                      for a in assignment.allocations if a.kind == "constant")
    # The program keeps allocation sizes and roles; what lives where is the assignment's.
    allocations = tuple(replace(a, assigned=()) for a in assignment.allocations)
    return ThunkProgram(module.name, allocations, params, outputs, constants,
                        emitter.sequence(entry))
