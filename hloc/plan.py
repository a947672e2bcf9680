"""The plan stage: what follows the HLO passes and precedes code generation.

`plan(module, target=...)` runs copy insertion (idempotent), sequential scheduling, alias
analysis and liveness, buffer assignment, thunk emission and, for CUDA, stream assignment.
For the CPU, buffer assignment also places the scratch of the fusions the code generator will
outline (a product and kernels around it: codegen/cpu/outline.py), so temp_bytes counts it.
Its Plan carries the bundle members of those stages. It sits above `buffers`, `schedule` and
`thunks` (which import `buffers.assignment`), so none of them has to import it back.
"""

from __future__ import annotations

from dataclasses import replace

from .analysis import AliasAnalysis, Dataflow, Liveness, Timeline
from .buffers import (
    BufferAssignment,
    MemoryStats,
    ScratchNeed,
    assign_buffers,
    assignment_to_proto_bytes,
    assignment_to_text,
)
from .ir import Instruction, Module, Opcode
from .passes.copy_insertion import insert_copies
from .schedule import assign_streams, candidate_schedules, store_schedule
from .thunks import ThunkProgram, emit_program, program_to_json, program_to_text
from .util.record import dataclass


@dataclass(frozen=True)
class Plan:
    """The scheduled module's buffer assignment and thunk program."""

    module: Module
    schedule: dict[str, tuple[str, ...]]
    assignment: BufferAssignment
    program: ThunkProgram
    memory: MemoryStats

    def members(self) -> dict[str, bytes]:
        """Bundle members: buffer_assignment.pb/.txt and thunks.json/.txt."""
        return {
            "buffer_assignment.pb": assignment_to_proto_bytes(self.assignment),
            "buffer_assignment.txt": assignment_to_text(self.assignment).encode(),
            "thunks.json": program_to_json(self.program),
            "thunks.txt": program_to_text(self.program).encode(),
        }


def plan(module: Module, *, target: str = "cpu", scheduler: str = "auto",
         max_streams: int = 4, copy_insertion: bool = True) -> Plan:
    """Schedule, assign and emit thunks for `module` (changed in place: copies, schedule).

    With scheduler "auto", every candidate schedule (see hloc.schedule.candidate_schedules)
    is assigned and the one with the fewest temp bytes is kept.
    """
    dataflow = insert_copies(module)[1] if copy_insertion else Dataflow(module)
    alias = AliasAnalysis(module, dataflow)
    sequences, assignment = _best_assignment(
        module, alias, candidate_schedules(module, scheduler, alias), _scratch(module, target))
    store_schedule(module, sequences)
    program = emit_program(assignment, sequences)
    if target == "cuda":
        program = replace(program, streams=assign_streams(program, max_streams))
    schedule = {name: tuple(names) for name, names in module.schedule.items()}
    return Plan(module, schedule, assignment, program, assignment.stats())


def _scratch(module: Module, target: str) -> dict[Instruction, ScratchNeed]:
    """Bytes each instruction's thunk needs while it runs (buffer assignment's `scratch`):
    on the CPU, the intermediate buffers of fusions its code generator outlines."""
    if target != "cpu":
        return {}
    from .codegen.cpu.thunk_kernels import thunk_scratch

    needs = {}
    for comp in module.computations:
        if comp.is_fusion:
            continue
        for instr in comp.instructions:
            if instr.opcode == Opcode.FUSION:
                need = thunk_scratch(instr)
                if need.alone or need.shared:
                    needs[instr] = need
    return needs


def _best_assignment(module: Module, alias: AliasAnalysis, candidates: dict,
                     scratch: dict[Instruction, ScratchNeed]):
    """(sequences, assignment) of the candidate schedule with the fewest temp bytes."""
    best = None
    for sequences in candidates.values():
        budget = None if best is None else best[1].stats().temp_bytes
        assignment = assign_buffers(module, alias, Liveness(alias, Timeline(module, sequences)),
                                    budget, scratch)
        if assignment is not None and (best is None or assignment.stats().temp_bytes < budget):
            best = (sequences, assignment)
    return best


__all__ = ["Plan", "plan"]
