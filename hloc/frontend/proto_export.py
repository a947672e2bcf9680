"""hloc.ir.Module -> HloModuleProto, keeping ids, names and order (the inverse of proto_import).

Like XLA, always writes the derivable or empty parts (program shapes, empty metadata,
frontend attributes, alias and donor lists) so that an XLA-written proto round-trips exactly.
"""

from __future__ import annotations

from hloc.ir.computation import Computation
from hloc.ir.instruction import Instruction
from hloc.ir.module import Module
from hloc.ir.opcodes import Opcode
from hloc.ir.shape import Shape

from .attr_messages import metadata_to_proto
from .attrs_proto import attrs_to_proto
from .devices_proto import export_spmd_fields
from .gen import hlo_pb2
from .shape_proto import shape_to_proto


def instruction_to_proto(instr: Instruction, out: hlo_pb2.HloInstructionProto) -> None:
    out.name = instr.name
    out.opcode = instr.opcode.text
    shape_to_proto(instr.shape, out.shape)
    metadata_to_proto(instr.metadata, out.metadata)
    attrs_to_proto(instr.attrs, out)
    if instr.opcode == Opcode.TOPK:  # text's default is largest=true, an absent proto field false
        out.largest = instr.attrs.largest is not False
    out.id = instr.id
    out.operand_ids.extend(op.id for op in instr.operands)
    out.control_predecessor_ids.extend(p.id for p in instr.control_predecessors)
    out.called_computation_ids.extend(c.id for c in instr.called)


def program_shape_to_proto(params: tuple[Shape, ...], result: Shape, names, out) -> None:
    out.SetInParent()
    for shape in params:
        shape_to_proto(shape, out.parameters.add())
    shape_to_proto(result, out.result)
    out.parameter_names.extend(names)


def computation_to_proto(comp: Computation, out: hlo_pb2.HloComputationProto) -> None:
    if comp.root is None:
        raise ValueError(f"computation {comp.name} has no root")
    out.name = comp.name
    # Operands (and control predecessors) first, as the proto requires; passes may append
    # instructions that earlier ones use (e.g. copies). A sorted list keeps its order.
    for instr in comp.post_order():
        instruction_to_proto(instr, out.instructions.add())
    params = comp.parameters
    program_shape_to_proto(
        tuple(p.shape for p in params), comp.root.shape, [p.name for p in params], out.program_shape
    )
    out.id = comp.id
    out.root_id = comp.root.id
    out.is_fusion_computation = comp.is_fusion
    out.execution_thread = comp.execution_thread


def _host_program_shape(module: Module, out) -> None:
    """The entry's signature; XLA names its parameters p0, p1, ..."""
    if module.config.entry_layout is not None:
        params, result = module.config.entry_layout
    else:
        params = tuple(p.shape for p in module.entry.parameters)
        result = module.entry.root.shape
    program_shape_to_proto(params, result, [f"p{i}" for i in range(len(params))], out)


def _schedule_to_proto(module: Module, out: hlo_pb2.HloScheduleProto) -> None:
    out.SetInParent()
    for comp_name, names in module.schedule.items():
        comp = module.computation(comp_name)
        ids = {i.name: i.id for i in comp.instructions}
        out.sequences[comp.id].instruction_ids.extend(ids[n] for n in names)


def module_to_proto(module: Module) -> hlo_pb2.HloModuleProto:
    """The HloModuleProto of a module (computations in module order)."""
    if module.entry is None:
        raise ValueError(f"module {module.name} has no entry computation")
    pb = hlo_pb2.HloModuleProto(name=module.name, entry_computation_name=module.entry.name)
    for comp in module.computations:
        computation_to_proto(comp, pb.computations.add())
    _host_program_shape(module, pb.host_program_shape)
    pb.id = module.id
    pb.entry_computation_id = module.entry.id
    if module.schedule is not None:
        _schedule_to_proto(module, pb.schedule)
    pb.input_output_alias.SetInParent()
    for a in module.input_output_alias:
        pb.input_output_alias.entries.add(
            output_shape_index=a.output_index,
            parameter_number=a.parameter_number,
            parameter_shape_index=a.parameter_index,
            kind=a.kind,
        )
    pb.buffer_donor.SetInParent()
    for d in module.buffer_donors:
        pb.buffer_donor.entries.add(
            parameter_number=d.parameter_number, parameter_shape_index=d.parameter_index
        )
    pb.frontend_attributes.SetInParent()
    pb.frontend_attributes.map.update(dict(module.frontend_attributes))
    export_spmd_fields(module, pb)
    return pb
