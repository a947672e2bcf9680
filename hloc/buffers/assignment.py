"""Buffer assignment: an allocation and offset for every value of a scheduled module.

Every entry parameter leaf and every constant gets its own allocation, so does every buffer
that is live out of the entry (maybe_live_out) unless it is a parameter's (input_output_alias)
or a constant's. All other buffers share one temp allocation packed by the heap simulator.
Before packing, an elementwise instruction's output takes over the storage of an operand that
dies at that instruction when their sizes match (operand-buffer reuse).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..analysis import AliasAnalysis, HloBuffer, HloValue, Liveness, leaves
from ..analysis.storage import is_read_only
from ..ir import Instruction, Module, Opcode, ShapeIndex
from .check import SharingError, check_buffers
from .heap import HeapItem, HeapResult, Placer, lower_bound, simulate
from .reuse import StorageUnits


@dataclass(frozen=True)
class Slice:
    """Bytes [offset, offset + size) of allocation `allocation`."""

    allocation: int
    offset: int
    size: int

    def to_json(self) -> list[int]:
        return [self.allocation, self.offset, self.size]


@dataclass(frozen=True)
class Allocation:
    """One block of memory the runtime allocates. kind: parameter | constant | output | temp."""

    index: int
    size: int
    kind: str
    parameter_number: int = -1
    parameter_index: ShapeIndex = ()
    maybe_live_out: bool = False
    aliased_with_output: bool = False
    constant: str = ""  # the constant instruction's name
    assigned: tuple[tuple[int, int, int], ...] = field(default=())  # (value id, offset, size)


@dataclass(frozen=True)
class MemoryStats:
    temp_bytes: int
    argument_bytes: int
    output_bytes: int
    constant_bytes: int

    def as_dict(self) -> dict[str, int]:
        return {"temp_bytes": self.temp_bytes, "argument_bytes": self.argument_bytes,
                "output_bytes": self.output_bytes, "constant_bytes": self.constant_bytes}


class BufferAssignment:
    """Allocations plus the slice of every value (look up by instruction and shape index)."""

    def __init__(self, module: Module, alias: AliasAnalysis, liveness: Liveness,
                 allocations: list[Allocation], value_slices: list[Slice],
                 heap: HeapResult, temp_lower_bound: int, units: dict[int, list[int]]):
        self.module = module
        self.alias = alias
        self.dataflow = alias.dataflow
        self.liveness = liveness
        self.allocations = allocations
        self.heap = heap
        self.temp_lower_bound = temp_lower_bound
        self.units = units  # storage unit key -> buffer ids sharing its storage
        self._value_slices = value_slices

    def value_slice(self, value: HloValue) -> Slice:
        return self._value_slices[value.id]

    def slice(self, instr: Instruction, index: ShapeIndex = ()) -> Slice:
        return self.value_slice(self.dataflow.value_at(instr, index))

    def leaf_slices(self, instr: Instruction) -> list[tuple[ShapeIndex, Slice]]:
        return [(i, self.value_slice(v)) for i, v in self.dataflow.leaves_of(instr)]

    @property
    def temp_allocation(self) -> Allocation | None:
        return next((a for a in self.allocations if a.kind == "temp"), None)

    def stats(self) -> MemoryStats:
        def total(pred) -> int:
            return sum(a.size for a in self.allocations if pred(a))
        return MemoryStats(
            temp_bytes=total(lambda a: a.kind == "temp"),
            argument_bytes=total(lambda a: a.kind == "parameter"),
            output_bytes=total(lambda a: a.maybe_live_out),
            constant_bytes=total(lambda a: a.kind == "constant"))


# ---- building ----------------------------------------------------------------------------------

def _kind(buf: HloBuffer, entry) -> str:
    params = [v for v in buf.values if is_read_only(v) and v.instruction.opcode == Opcode.PARAMETER]
    consts = [v for v in buf.values if v.instruction.opcode == Opcode.CONSTANT]
    if len(params) + len(consts) > 1:
        raise SharingError(f"buffer {buf.id} holds several parameters/constants: "
                           f"{params + consts} (was copy insertion run?)")
    if params:
        return "parameter"
    if consts:
        return "constant"
    return "output" if any(entry in v.root_of for v in buf.values) else "temp"


def assign_buffers(module: Module, alias: AliasAnalysis, liveness: Liveness,
                   budget: int | None = None) -> BufferAssignment | None:
    """Allocate every buffer of a scheduled, copy-inserted module.

    With a `budget`, gives up (returns None) as soon as a lower bound shows the temp
    allocation could not be smaller than `budget` bytes: comparing schedules then skips the
    packing of hopeless ones."""
    check_buffers(alias, liveness)
    entry = module.entry
    kinds = [_kind(b, entry) for b in alias.buffers]
    fixed = _fixed_order(alias, kinds)
    reuse = StorageUnits(alias, liveness, kinds)
    units = reuse.units()
    items = {key: HeapItem(key, liveness.buffer_start[bids[0]],
                           max(liveness.buffer_end[b] for b in bids),
                           max(alias.buffers[b].size for b in bids)) for key, bids in units.items()}
    if budget is not None and _temp_bound(items, fixed, kinds) >= budget:
        return None
    position = {buf.id: i for i, buf in enumerate(fixed)}
    hosted = {key: (position[out], 0) for out, key in reuse.absorbed.items()}
    hosted.update(_pack_into_outputs(
        {k: it for k, it in items.items() if k not in hosted}, fixed, kinds, liveness,
        {out: items[key].start for out, key in reuse.absorbed.items()}))
    temp_items = [it for key, it in items.items() if key not in hosted]
    heap = simulate(temp_items)
    places = dict(hosted)
    places.update((key, (len(fixed), off)) for key, off in heap.offsets.items())
    value_slices: list[Slice | None] = [None] * len(alias.dataflow.values)
    assigned: dict[int, list[tuple[int, int, int]]] = {i: [] for i in range(len(fixed) + 1)}
    for index, buf in enumerate(fixed):
        for v in buf.values:
            value_slices[v.id] = Slice(index, 0, v.size)
            assigned[index].append((v.id, 0, v.size))
    for key, bids in units.items():
        index, offset = places[key]
        for v in (v for b in bids for v in alias.buffers[b].values):
            value_slices[v.id] = Slice(index, offset, v.size)
            assigned[index].append((v.id, offset, v.size))
    allocations = [_fixed_allocation(i, buf, kinds[buf.id], entry, tuple(sorted(assigned[i])))
                   for i, buf in enumerate(fixed)]
    allocations.append(Allocation(len(fixed), heap.size, "temp",
                                  assigned=tuple(sorted(assigned[len(fixed)]))))
    return BufferAssignment(module, alias, liveness, allocations, value_slices, heap,
                            lower_bound(temp_items), units)


def _temp_bound(items: dict[int, HeapItem], fixed: list[HloBuffer], kinds: list[str]) -> int:
    """No packing needs fewer temp bytes: the most bytes live at once, less what every
    output allocation could hold."""
    room = sum(buf.size for buf in fixed if kinds[buf.id] == "output")
    return lower_bound(list(items.values())) - room


def _pack_into_outputs(items: dict[int, HeapItem], fixed: list[HloBuffer], kinds: list[str],
                       liveness: Liveness, taken_from: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Put temporaries that die before an output is defined into that output's allocation
    (as XLA does): it is free until then. Largest temporaries first, smallest fitting output
    first. `taken_from`: output buffer id -> tick from which an absorbed operand already
    occupies its allocation. Returns {item key: (allocation index, offset)}."""
    hosts = []
    for index, buf in enumerate(fixed):
        if kinds[buf.id] == "output":
            start = taken_from.get(buf.id, liveness.buffer_start[buf.id])
            placer = Placer()
            placer.place(HeapItem(-1, start, liveness.buffer_end[buf.id], buf.size))
            hosts.append((buf.size, start, index, placer))
    hosts.sort(key=lambda h: (h[0], h[2]))
    placed: dict[int, tuple[int, int]] = {}
    for item in sorted(items.values(), key=lambda it: (-it.size, it.start, it.key)):
        if item.size == 0:
            continue
        tries = 0
        for size, start, index, placer in hosts:
            if size < item.size or start <= item.end:
                continue
            offset = placer.place(item, capacity=size)
            if offset is not None:
                placed[item.key] = (index, offset)
                break
            tries += 1
            if tries >= _MAX_TRIES:
                break
    return placed


# Bounds the work per temporary when a module has many outputs.
_MAX_TRIES = 8


def _fixed_order(alias: AliasAnalysis, kinds: list[str]) -> list[HloBuffer]:
    """Parameter buffers by (number, index), then constants, then outputs by root position."""
    def param_key(buf):
        v = next(v for v in buf.values if v.instruction.opcode == Opcode.PARAMETER
                 and is_read_only(v))
        return v.instruction.attrs.parameter_number, v.index
    entry = alias.module.entry
    root_rank = {alias.buffer_of(v).id: i for i, (_, v) in
                 enumerate(leaves(alias.dataflow.tree(entry.root)))}
    params = sorted((b for b in alias.buffers if kinds[b.id] == "parameter"), key=param_key)
    consts = [b for b in alias.buffers if kinds[b.id] == "constant"]
    outputs = sorted((b for b in alias.buffers if kinds[b.id] == "output"),
                     key=lambda b: root_rank.get(b.id, -1))
    return params + consts + outputs


def _fixed_allocation(index: int, buf: HloBuffer, kind: str, entry, assigned) -> Allocation:
    live_out = any(entry in v.root_of for v in buf.values)
    if kind == "parameter":
        p = next(v for v in buf.values if is_read_only(v))
        return Allocation(index, buf.size, kind, p.instruction.attrs.parameter_number, p.index,
                          maybe_live_out=live_out, aliased_with_output=live_out,
                          assigned=assigned)
    if kind == "constant":
        c = next(v for v in buf.values if v.instruction.opcode == Opcode.CONSTANT)
        return Allocation(index, buf.size, kind, maybe_live_out=live_out,
                          constant=c.instruction.name, assigned=assigned)
    return Allocation(index, buf.size, kind, maybe_live_out=True, assigned=assigned)
