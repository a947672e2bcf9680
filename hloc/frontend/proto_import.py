"""HloModuleProto -> hloc.ir.Module, with every structural problem reported as InputError.

XLA's rules are kept: instructions list their operands (and control predecessors) first,
modules list callees first; ids are unique module-wide. Each error message names the file,
the computation and the instruction.
"""

from __future__ import annotations

from hloc.errors import InputError, UnsupportedError
from hloc.ir.computation import Computation
from hloc.ir.instruction import Instruction
from hloc.ir.module import AliasEntry, BufferDonor, Module
from hloc.ir.opcodes import Opcode

from .attr_messages import metadata_from_proto
from .attrs_proto import attrs_from_proto
from .devices_proto import import_spmd_fields
from .gen import hlo_pb2
from .shape_proto import MalformedProto, UnsupportedProto, quote, shape_from_proto


class _Where:
    """Names the place being converted, to turn local problems into located errors."""

    def __init__(self, path: str | None):
        self.path = path
        self.computation: str | None = None
        self.instruction: str | None = None

    def prefix(self) -> str:
        parts = []
        if self.computation is not None:
            parts.append(f"computation {quote(self.computation)}")
        if self.instruction is not None:
            parts.append(f"instruction {quote(self.instruction)}")
        return ", ".join(parts) + ": " if parts else ""

    def error(self, reason: str) -> InputError:
        return InputError(self.prefix() + reason, self.path)

    def unsupported(self, reason: str) -> UnsupportedError:
        return UnsupportedError(self.prefix() + reason, self.path)


class _Importer:
    """One module's conversion state: computations and instructions seen so far, by id."""

    def __init__(self, path: str | None):
        self.where = _Where(path)
        self.computations: dict[int, Computation] = {}
        self.instruction_ids: set[int] = set()
        self.names: set[str] = set()

    # ---- instructions -----------------------------------------------------------------------
    def instruction(self, pb, local: dict[int, Instruction]) -> Instruction:
        self.where.instruction = pb.name or f"id {pb.id}"
        if not pb.name:
            raise self.where.error("instruction has no name")
        try:
            opcode = Opcode.parse(pb.opcode)
        except ValueError:
            raise self.where.error(f"unknown opcode {quote(pb.opcode)}") from None
        if not pb.HasField("shape"):
            raise self.where.error("instruction has no shape")
        self._claim_id(pb.id, self.instruction_ids, "instruction")
        operands = [self._operand(i, local, "operand") for i in pb.operand_ids]
        called = [self._callee(i) for i in pb.called_computation_ids]
        try:
            shape = shape_from_proto(pb.shape)
            attrs = attrs_from_proto(pb, opcode)
        except MalformedProto as e:
            raise self.where.error(str(e)) from None
        except UnsupportedProto as e:
            raise self.where.unsupported(str(e)) from None
        instr = Instruction(
            opcode,
            shape,
            operands,
            name=pb.name,
            called=called,
            attrs=attrs,
            metadata=metadata_from_proto(pb.metadata),
            id=pb.id,
        )
        self._check_instruction(instr)
        for pred_id in pb.control_predecessor_ids:
            self._operand(pred_id, local, "control predecessor").add_control_dependency(instr)
        return instr

    def _claim_id(self, ident: int, seen: set[int], what: str) -> None:
        if ident < 0:
            raise self.where.error(f"{what} has a negative id {ident}")
        if ident in seen:
            raise self.where.error(f"duplicate {what} id {ident}")
        seen.add(ident)

    def _operand(self, ident: int, local: dict[int, Instruction], what: str) -> Instruction:
        found = local.get(ident)
        if found is None:
            raise self.where.error(
                f"{what} id {ident} is not an earlier instruction of this computation"
            )
        return found

    def _callee(self, ident: int) -> Computation:
        found = self.computations.get(ident)
        if found is None:
            raise self.where.error(
                f"called computation id {ident} is not an earlier computation of the module"
            )
        return found

    def _check_instruction(self, instr: Instruction) -> None:
        """The few checks conversion itself needs; the verifier does the rest."""
        if instr.opcode == Opcode.CONSTANT and instr.attrs.literal is None:
            raise self.where.error("constant has no literal")
        if instr.opcode == Opcode.PARAMETER and instr.attrs.parameter_number < 0:
            raise self.where.error("negative parameter number")
        if instr.opcode == Opcode.GET_TUPLE_ELEMENT:
            source = instr.operands[0].shape if len(instr.operands) == 1 else None
            if source is None or not source.is_tuple:
                raise self.where.error("get-tuple-element needs one tuple-shaped operand")
            if not 0 <= instr.attrs.tuple_index < len(source.tuple_shapes):
                raise self.where.error(
                    f"tuple index {instr.attrs.tuple_index} out of range for "
                    f"a {len(source.tuple_shapes)}-element tuple"
                )

    # ---- computations -----------------------------------------------------------------------
    def computation(self, pb) -> Computation:
        self.where.computation, self.where.instruction = pb.name or f"id {pb.id}", None
        if not pb.name:
            raise self.where.error("computation has no name")
        self._claim_id(pb.id, set(self.computations), "computation")
        comp = Computation(
            pb.name,
            is_fusion=pb.is_fusion_computation,
            id=pb.id,
            execution_thread=pb.execution_thread,
        )
        local: dict[int, Instruction] = {}
        params: set[int] = set()
        for ipb in pb.instructions:
            instr = self.instruction(ipb, local)
            self._unique_name(instr.name, "instruction")
            if instr.opcode == Opcode.PARAMETER:
                self._unique_parameter(instr.attrs.parameter_number, params)
            local[ipb.id] = instr
            comp.add(instr)
        self.where.instruction = None
        if not local:
            raise self.where.error("computation has no instructions")
        comp.root = local.get(pb.root_id)
        if comp.root is None:
            raise self.where.error(
                f"root id {pb.root_id} is not an instruction of this computation"
            )
        self.computations[pb.id] = comp
        return comp

    def _unique_name(self, name: str, what: str) -> None:
        if name in self.names:
            raise self.where.error(f"duplicate {what} name {quote(name)}")
        self.names.add(name)

    def _unique_parameter(self, number: int, seen: set[int]) -> None:
        if number in seen:
            raise self.where.error(f"duplicate parameter number {number}")
        seen.add(number)


def module_from_proto(pb: hlo_pb2.HloModuleProto, path: str | None = None) -> Module:
    """Convert a module proto; InputError (naming `path`) on any malformation."""
    importer = _Importer(path)
    module = Module(pb.name, id=pb.id)
    computations = [importer.computation(cpb) for cpb in pb.computations]
    importer.where.computation = importer.where.instruction = None
    if not computations:
        raise importer.where.error("module has no computations")
    entry = _find_entry(pb, importer)
    _check_computation_names(computations, importer)
    for comp in computations:
        module.add_computation(comp, entry=comp is entry)
    _import_module_fields(pb, module, importer)
    return module


def _find_entry(pb, importer: _Importer) -> Computation:
    """Entry by entry_computation_id (XLA's rule), else by entry_computation_name."""
    name = pb.entry_computation_name
    by_id = importer.computations.get(pb.entry_computation_id)
    if by_id is not None and (pb.entry_computation_id or not name or by_id.name == name):
        if name and by_id.name != name:
            raise importer.where.error(
                f"entry computation id {pb.entry_computation_id} is "
                f"{quote(by_id.name)} but entry_computation_name is {quote(name)}"
            )
        return by_id
    for comp in importer.computations.values():
        if name and comp.name == name:
            return comp
    raise importer.where.error(
        f"missing entry computation (id {pb.entry_computation_id}, name {quote(name)})"
    )


def _check_computation_names(computations: list[Computation], importer: _Importer) -> None:
    """Computation names must be unique (they may equal instruction names, as in XLA)."""
    seen: set[str] = set()
    for comp in computations:
        if comp.name in seen:
            importer.where.computation = comp.name
            raise importer.where.error("duplicate computation name")
        seen.add(comp.name)


def _import_module_fields(pb, module: Module, importer: _Importer) -> None:
    where = importer.where
    if pb.HasField("schedule"):
        module.schedule = _schedule_from_proto(pb.schedule, importer)
    for entry in pb.input_output_alias.entries:
        if entry.kind not in hlo_pb2.Kind.values() or entry.parameter_number < 0:
            raise where.error("malformed input_output_alias entry")
        module.input_output_alias += (
            AliasEntry(
                tuple(entry.output_shape_index),
                entry.parameter_number,
                tuple(entry.parameter_shape_index),
                entry.kind,
            ),
        )
    for donor in pb.buffer_donor.entries:
        module.buffer_donors += (
            BufferDonor(donor.parameter_number, tuple(donor.parameter_shape_index)),
        )
    module.frontend_attributes = tuple(sorted(pb.frontend_attributes.map.items()))
    try:
        import_spmd_fields(pb, module)
    except MalformedProto as e:
        raise where.error(str(e)) from None
    if pb.HasField("host_program_shape"):
        try:
            module.config.entry_layout = program_shape_from_proto(pb.host_program_shape)
        except MalformedProto as e:
            raise where.error(f"host_program_shape: {e}") from None
        except UnsupportedProto as e:
            raise where.unsupported(f"host_program_shape: {e}") from None


def program_shape_from_proto(pb):
    """(parameter shapes, result shape) of a ProgramShapeProto."""
    return tuple(shape_from_proto(p) for p in pb.parameters), shape_from_proto(pb.result)


def _schedule_from_proto(pb, importer: _Importer) -> dict[str, list[str]]:
    schedule: dict[str, list[str]] = {}
    for comp_id in sorted(pb.sequences):
        comp = importer.computations.get(comp_id)
        if comp is None:
            raise importer.where.error(f"schedule names unknown computation id {comp_id}")
        by_id = {i.id: i.name for i in comp.instructions}
        names = []
        for ident in pb.sequences[comp_id].instruction_ids:
            if ident not in by_id:
                raise importer.where.error(
                    f"schedule of {quote(comp.name)} names instruction id "
                    f"{ident}, which is not in that computation"
                )
            names.append(by_id[ident])
        schedule[comp.name] = names
    return schedule
