"""Buffer assignment: an allocation and offset for every value of a scheduled module.

Every entry parameter leaf and every constant gets its own allocation, so does every buffer
that is live out of the entry (maybe_live_out) unless it is a parameter's (input_output_alias)
or a constant's. All other buffers share one temp allocation packed by the heap simulator,
and so does the *scratch* of instructions that need memory of their own only while they run
(`scratch`: the CPU code generator's outlined fusions, codegen/cpu/outline.py): an item live
at that instruction's tick alone. Before packing, an elementwise instruction's output takes over the storage of an operand that
dies at that instruction when their sizes match (operand-buffer reuse).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from ..analysis import AliasAnalysis, HloBuffer, HloValue, Liveness, leaves
from ..analysis.storage import is_read_only
from ..ir import Instruction, Module, Opcode, ShapeIndex
from ..util.record import dataclass
from .check import SharingError, check_buffers
from .heap import HeapItem, HeapResult, lower_bound, simulate
from .hosting import host_greedy, host_peaks, make_hosts
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
class ScratchNeed:
    """Bytes an instruction needs while it runs: `alone` when its output shares no storage
    with an operand, `shared` when it does (then its own result cannot be built in place)."""

    alone: int
    shared: int


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
                 heap: HeapResult, temp_lower_bound: int, units: dict[int, list[int]],
                 scratch: dict[str, Slice] | None = None):
        self.module = module
        self.alias = alias
        self.dataflow = alias.dataflow
        self.liveness = liveness
        self.allocations = allocations
        self.heap = heap
        self.temp_lower_bound = temp_lower_bound
        self.units = units  # storage unit key -> buffer ids sharing its storage
        self._value_slices = value_slices
        self.scratch = scratch or {}  # instruction name -> its scratch slice

    def scratch_slice(self, instr: Instruction) -> Slice | None:
        return self.scratch.get(instr.name)

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
                   budget: int | None = None,
                   scratch: Mapping[Instruction, ScratchNeed] | None = None
                   ) -> BufferAssignment | None:
    """Allocate every buffer of a scheduled, copy-inserted module.

    Several packings are tried (operand reuse into outputs on or off, greedy or peak-driven
    hosting of temporaries in outputs) and the smallest temp heap is kept, the first on ties.
    With a `budget`, gives up (returns None) as soon as a lower bound shows the temp
    allocation could not be smaller than `budget` bytes: comparing schedules then skips the
    packing of hopeless ones. `scratch`: bytes an instruction needs while it runs."""
    check_buffers(alias, liveness)
    entry = module.entry
    kinds = [_kind(b, entry) for b in alias.buffers]
    fixed = _fixed_order(alias, kinds)
    best: _Packing | None = None
    tried: dict = {"units": {}, "packings": set()}
    needs = _scratch_needs(liveness, scratch or {})
    for absorb, hosting in _VARIANTS:
        limit = budget if best is None else best.heap.size
        packing = _pack(alias, liveness, kinds, fixed, absorb, hosting, limit, tried, needs)
        if packing is not None and (limit is None or packing.heap.size < limit):
            best = packing
    return None if best is None else _build(module, alias, liveness, kinds, fixed, best)


def _scratch_needs(liveness: Liveness, scratch: Mapping[Instruction, ScratchNeed]
                   ) -> list[tuple[int, Instruction, ScratchNeed]]:
    """(tick, instruction, need) of every scheduled instruction with a scratch need."""
    start = liveness.timeline.start
    return sorted(((start[i], i, n) for i, n in scratch.items()
                   if i in start and max(n.alone, n.shared) > 0), key=lambda t: (t[0], t[1].name))


def _scratch_items(needs, reuse: StorageUnits) -> dict[int, tuple[str, HeapItem]]:
    """Heap items (negative keys: unit keys are buffer ids) for instructions' scratch, each
    live at its instruction's tick alone, by key with the instruction's name."""
    out = {}
    for k, (tick, instr, need) in enumerate(needs):
        size = need.shared if reuse.shares_operand_storage(instr) else need.alone
        if size > 0:
            out[-1 - k] = (instr.name, HeapItem(-1 - k, tick, tick, size))
    return out


# (absorb dying operands into outputs, hosting strategy), in order of preference on ties.
_VARIANTS = ((True, host_greedy), (True, host_peaks), (False, host_greedy), (False, host_peaks))


@dataclass
class _Packing:
    """Storage units and where each lives: (allocation index, offset) for those hosted in a
    fixed allocation, else an offset in the temp heap."""

    units: dict[int, list[int]]
    hosted: dict[int, tuple[int, int]]
    heap: HeapResult
    temp_items: list[HeapItem]
    scratch: dict[int, tuple[str, int]]  # heap item key -> (instruction, bytes) of a scratch


def _pack(alias: AliasAnalysis, liveness: Liveness, kinds: list[str], fixed: list[HloBuffer],
          absorb: bool, hosting, budget: int | None, tried: dict, needs) -> _Packing | None:
    """One packing variant, or None if it cannot beat `budget` temp bytes or repeats one in
    `tried["packings"]` (variants often coincide: no output absorbs anything, or both
    hosting strategies choose alike); `tried` records this one."""
    reuse = _storage_units(alias, liveness, kinds, absorb, tried)
    units = reuse.units()
    items = {key: HeapItem(key, liveness.buffer_start[bids[0]],
                           max(liveness.buffer_end[b] for b in bids),
                           max(alias.buffers[b].size for b in bids)) for key, bids in units.items()}
    scratch = _scratch_items(needs, reuse)
    items.update((key, item) for key, (_, item) in scratch.items())
    if budget is not None and _temp_bound(items, fixed, kinds) >= budget:
        return None
    position = {buf.id: i for i, buf in enumerate(fixed)}
    hosted = {key: (position[out], 0) for out, key in reuse.absorbed.items()}
    taken_from = {out: items[key].start for out, key in reuse.absorbed.items()}
    hosts = make_hosts([(i, buf.size, taken_from.get(buf.id, liveness.buffer_start[buf.id]),
                         liveness.buffer_end[buf.id])
                        for i, buf in enumerate(fixed) if kinds[buf.id] == "output"])
    hosted.update(hosting({k: it for k, it in items.items() if k not in hosted}, hosts))
    key = (tuple(map(tuple, units.values())), tuple(sorted(hosted.items())))
    if key in tried["packings"]:
        return None
    tried["packings"].add(key)
    temp_items = [it for key, it in items.items() if key not in hosted]
    if budget is not None and lower_bound(temp_items) >= budget:
        return None
    return _Packing(units, hosted, simulate(temp_items), temp_items,
                    {key: (name, item.size) for key, (name, item) in scratch.items()})


def _storage_units(alias: AliasAnalysis, liveness: Liveness, kinds: list[str], absorb: bool,
                   tried: dict) -> StorageUnits:
    """Operand reuse with or without absorption into outputs (memoized in `tried["units"]`);
    without, the units with absorption serve again when they absorbed nothing."""
    memo = tried["units"]
    if absorb not in memo:
        with_absorption = memo.get(True)
        memo[absorb] = (with_absorption if with_absorption is not None
                        and not with_absorption.absorbed
                        else StorageUnits(alias, liveness, kinds, absorb_outputs=absorb))
    return memo[absorb]


def _build(module: Module, alias: AliasAnalysis, liveness: Liveness, kinds: list[str],
           fixed: list[HloBuffer], packing: _Packing) -> BufferAssignment:
    """The allocations and value slices of a chosen packing."""
    entry = module.entry
    places = dict(packing.hosted)
    places.update((key, (len(fixed), off)) for key, off in packing.heap.offsets.items())
    value_slices: list[Slice | None] = [None] * len(alias.dataflow.values)
    assigned: dict[int, list[tuple[int, int, int]]] = {i: [] for i in range(len(fixed) + 1)}
    for index, buf in enumerate(fixed):
        for v in buf.values:
            value_slices[v.id] = Slice(index, 0, v.size)
            assigned[index].append((v.id, 0, v.size))
    for key, bids in packing.units.items():
        index, offset = places[key]
        for v in (v for b in bids for v in alias.buffers[b].values):
            value_slices[v.id] = Slice(index, offset, v.size)
            assigned[index].append((v.id, offset, v.size))
    scratch = {}
    for key, (name, size) in packing.scratch.items():
        index, offset = places[key]
        scratch[name] = Slice(index, offset, size)
    allocations = [_fixed_allocation(i, buf, kinds[buf.id], entry, tuple(sorted(assigned[i])))
                   for i, buf in enumerate(fixed)]
    allocations.append(Allocation(len(fixed), packing.heap.size, "temp",
                                  assigned=tuple(sorted(assigned[len(fixed)]))))
    return BufferAssignment(module, alias, liveness, allocations, value_slices, packing.heap,
                            lower_bound(packing.temp_items), packing.units, scratch)


def _temp_bound(items: dict[int, HeapItem], fixed: list[HloBuffer], kinds: list[str]) -> int:
    """No packing needs fewer temp bytes: the most bytes live at once, less what every
    output allocation could hold."""
    room = sum(buf.size for buf in fixed if kinds[buf.id] == "output")
    return lower_bound(list(items.values())) - room


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
