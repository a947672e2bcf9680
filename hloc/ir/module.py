"""HLO modules: computations (callees first), the entry, schedule and aliasing config."""

from __future__ import annotations

import re
from dataclasses import field

from ..util.record import dataclass
from .computation import Computation, dfs_post_order
from .instruction import Instruction
from .shape import Shape, ShapeIndex


@dataclass(frozen=True)
class AliasEntry:
    """An input/output alias: output `output_index` may/must reuse parameter storage."""

    output_index: ShapeIndex
    parameter_number: int
    parameter_index: ShapeIndex
    kind: int = 1  # MAY_ALIAS=1, MUST_ALIAS=2


@dataclass(frozen=True)
class BufferDonor:
    parameter_number: int
    parameter_index: ShapeIndex


@dataclass
class ModuleConfig:
    """The parts of HloModuleConfigProto hloc uses."""

    replica_count: int = 1
    num_partitions: int = 1
    seed: int = 0
    launch_id: int = 0
    entry_layout: tuple[tuple[Shape, ...], Shape] | None = None  # (param shapes, result shape)
    # Multi-device modules: device_assignment[replica][partition] is a global device id (None:
    # the default, replica * num_partitions + partition). The SPMD shardings of the entry's
    # parameters and result (HLO text form) come from HloModuleProto's spmd_* fields.
    device_assignment: tuple[tuple[int, ...], ...] | None = None
    spmd_parameter_shardings: tuple[str, ...] | None = None
    spmd_output_sharding: str | None = None

    @property
    def device_count(self) -> int:
        return self.replica_count * self.num_partitions

    def device_id(self, replica: int, partition: int) -> int:
        """The global device id running (replica, partition)."""
        if self.device_assignment is None:
            return replica * self.num_partitions + partition
        return self.device_assignment[replica][partition]


@dataclass
class ProgramShape:
    parameters: tuple[Shape, ...]
    result: Shape
    parameter_names: tuple[str, ...] = field(default=())


class Module:
    """An HLO module: owns computations, gives out unique names and ids."""

    def __init__(self, name: str, *, id: int = 0):
        self.name = name
        self.id = id
        self.computations: list[Computation] = []
        self.entry: Computation | None = None
        self.schedule: dict[str, list[str]] | None = None  # computation name -> instruction names
        self.input_output_alias: tuple[AliasEntry, ...] = ()
        self.buffer_donors: tuple[BufferDonor, ...] = ()
        self.config = ModuleConfig()
        self.frontend_attributes: tuple[tuple[str, str], ...] = ()
        self._names: set[str] = set()
        self._name_counters: dict[str, int] = {}
        # Computations have their own namespace (as in XLA): a computation and an instruction
        # may share a name, e.g. JAX's `sort.2` computation next to a `sort.2` parameter.
        self._comp_names: set[str] = set()
        self._next_id = 1

    # ---- ownership ----------------------------------------------------------------------
    def add_computation(self, comp: Computation, *, entry: bool = False) -> Computation:
        """Add a computation (and register its instructions); callees must be added first."""
        if comp.name in self._comp_names:
            comp.name = _unique_in(comp.name, self._comp_names)
        self._comp_names.add(comp.name)
        comp.parent = self
        if comp.id < 0:
            comp.id = self._take_id()
        else:
            self._next_id = max(self._next_id, comp.id + 1)
        for instr in comp.instructions:
            self.register(instr)
        self.computations.append(comp)
        if entry:
            self.entry = comp
        return comp

    def register(self, instr: Instruction) -> None:
        """Give an instruction a unique name and id if it lacks them."""
        if not instr.name or instr.name in self._names:
            instr.name = self.unique_name(instr.name or instr.opcode.value)
        self._names.add(instr.name)
        if instr.id < 0:
            instr.id = self._take_id()
        else:
            self._next_id = max(self._next_id, instr.id + 1)

    def _take_id(self) -> int:
        nid = self._next_id
        self._next_id += 1
        return nid

    def unique_name(self, base: str) -> str:
        """A fresh instruction name derived from base (computations: add_computation renames)."""
        return _unique_in(base, self._names, self._name_counters)

    def remove_computation(self, comp: Computation) -> None:
        self.computations.remove(comp)
        if self.schedule is not None:
            self.schedule.pop(comp.name, None)

    # ---- queries ------------------------------------------------------------------------
    def computation(self, name: str) -> Computation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(f"no computation {name} in module {self.name}")

    def computation_post_order(self) -> list[Computation]:
        """Every computation reachable from the entry, callees before callers (iterative:
        nesting depth is bounded by data, not by Python's stack)."""
        starts = [self.entry] if self.entry is not None else []
        return dfs_post_order(starts, lambda c: c.called_computations())

    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations)

    def program_shape(self) -> ProgramShape:
        assert self.entry is not None
        params = self.entry.parameters
        return ProgramShape(tuple(p.shape for p in params), self.entry.result_shape,
                            tuple(p.name for p in params))

    # ---- cloning ------------------------------------------------------------------------
    def clone(self, name: str | None = None) -> Module:
        """A deep copy sharing nothing mutable; names and ids are preserved."""
        new = Module(name or self.name, id=self.id)
        new.input_output_alias = self.input_output_alias
        new.buffer_donors = self.buffer_donors
        new.config = ModuleConfig(**vars(self.config))
        new.frontend_attributes = self.frontend_attributes
        new.schedule = ({k: list(v) for k, v in self.schedule.items()}
                        if self.schedule is not None else None)
        comp_map: dict[int, Computation] = {}
        for comp in self.computations:
            copy = clone_computation(comp, comp_map)
            comp_map[id(comp)] = copy
            new.add_computation(copy, entry=comp is self.entry)
        return new


def _unique_in(base: str, taken: set[str], counters: dict[str, int] | None = None) -> str:
    """base, or base.N for the first free N; `counters` remembers N per base (linear time)."""
    base = re.sub(r"\.\d+$", "", base) or "x"
    if base not in taken:
        return base
    n = counters.get(base, 1) if counters is not None else 1
    while f"{base}.{n}" in taken:
        n += 1
    if counters is not None:
        counters[base] = n + 1
    return f"{base}.{n}"


def clone_computation(comp: Computation, comp_map: dict[int, Computation] | None = None,
                      *, name: str | None = None, keep_ids: bool = True) -> Computation:
    """Copy a computation; called computations are remapped through comp_map when present."""
    comp_map = comp_map or {}
    copy = Computation(name or comp.name, is_fusion=comp.is_fusion,
                       id=comp.id if keep_ids else -1, execution_thread=comp.execution_thread)
    instr_map: dict[int, Instruction] = {}
    for instr in comp.post_order():
        new = Instruction(instr.opcode, instr.shape, [instr_map[id(o)] for o in instr.operands],
                          name=instr.name, called=[comp_map.get(id(c), c) for c in instr.called],
                          attrs=instr.attrs, metadata=instr.metadata,
                          id=instr.id if keep_ids else -1)
        instr_map[id(instr)] = new
    # Keep the original instruction order (it is the proto/text order users see).
    for instr in comp.instructions:
        new = instr_map[id(instr)]
        for p in instr.control_predecessors:
            instr_map[id(p)].add_control_dependency(new)
        copy.add(new)
    copy.root = instr_map[id(comp.root)] if comp.root is not None else None
    return copy


