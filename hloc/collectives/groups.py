"""Who takes part in a collective: XLA's group modes and the device-assignment mapping.

A device is addressed as (replica, partition); `DeviceGrid` maps it to its global device id
through the module's device assignment (JAX's global ids need not be contiguous). For each
collective instruction and each device, `participants` gives the ordered list of devices that
exchange data with it and its position in that list, as XLA's GetParticipatingDevices does.
"""

from __future__ import annotations

import enum

from hloc.errors import InputError
from hloc.ir import Instruction
from hloc.ir.module import ModuleConfig
from hloc.ir.opcodes import Opcode as O

from ..util.record import dataclass

Device = tuple[int, int]  # (replica, partition)

# Ops whose HLO instruction has a use_global_device_ids field: for them a channel_id without
# use_global_device_ids means cross-replica-and-partition; for the others, cross-partition.
_HAS_GLOBAL_IDS_FIELD = frozenset({
    O.ALL_REDUCE, O.ALL_REDUCE_START, O.ALL_GATHER, O.ALL_GATHER_START, O.REDUCE_SCATTER})


class GroupMode(enum.Enum):
    """XLA's CollectiveOpGroupMode: what the ids in replica_groups count."""

    CROSS_REPLICA = "cross_replica"
    CROSS_PARTITION = "cross_partition"
    CROSS_REPLICA_AND_PARTITION = "cross_replica_and_partition"
    FLATTENED_ID = "flattened_id"


def group_mode(has_channel_id: bool, use_global_device_ids: bool | None) -> GroupMode:
    """XLA's GetCollectiveOpGroupMode; use_global_device_ids None: the op has no such field."""
    if not has_channel_id:
        if use_global_device_ids:
            raise InputError("use_global_device_ids=true needs a channel_id")
        return GroupMode.CROSS_REPLICA
    if use_global_device_ids is None:
        return GroupMode.CROSS_PARTITION
    return GroupMode.FLATTENED_ID if use_global_device_ids else \
        GroupMode.CROSS_REPLICA_AND_PARTITION


def instruction_group_mode(instr: Instruction) -> GroupMode:
    attrs = instr.attrs
    ugdi = bool(attrs.use_global_device_ids) if instr.opcode in _HAS_GLOBAL_IDS_FIELD else None
    return group_mode(bool(attrs.channel_id), ugdi)


@dataclass(frozen=True)
class DeviceGrid:
    """The replica x partition grid of a module and its device assignment."""

    replica_count: int = 1
    num_partitions: int = 1
    device_assignment: tuple[tuple[int, ...], ...] | None = None

    @classmethod
    def of(cls, config: ModuleConfig) -> DeviceGrid:
        grid = cls(config.replica_count, config.num_partitions, config.device_assignment)
        da = grid.device_assignment
        if da is not None and (len(da) != grid.replica_count
                               or any(len(row) != grid.num_partitions for row in da)):
            raise InputError(f"device assignment is {len(da)}x{len(da[0]) if da else 0}, the "
                             f"module has {grid.replica_count} replicas x "
                             f"{grid.num_partitions} partitions")
        return grid

    @property
    def count(self) -> int:
        return self.replica_count * self.num_partitions

    def devices(self) -> list[Device]:
        """Every device, replica-major (the flattened-id order)."""
        return [(r, p) for r in range(self.replica_count) for p in range(self.num_partitions)]

    def device_id(self, device: Device) -> int:
        r, p = device
        if self.device_assignment is None:
            return r * self.num_partitions + p
        return self.device_assignment[r][p]

    def flattened(self, device: Device) -> int:
        return device[0] * self.num_partitions + device[1]


def _find_group(groups, me: int, all_ids: int, what: str) -> tuple[int, ...]:
    if not groups:
        return tuple(range(all_ids))
    for g in groups:
        if me in g:
            return tuple(g)
    raise InputError(f"{what} {me} is in none of the replica groups {list(map(list, groups))}")


def participants(mode: GroupMode, groups, grid: DeviceGrid, device: Device) -> list[Device]:
    """The devices taking part with `device`, in XLA's order (the position is the rank)."""
    r, p = device
    if mode == GroupMode.CROSS_REPLICA:
        return [(q, p) for q in _find_group(groups, r, grid.replica_count, "replica")]
    if mode == GroupMode.CROSS_PARTITION:
        return [(r, q) for q in _find_group(groups, p, grid.num_partitions, "partition")]
    if mode == GroupMode.CROSS_REPLICA_AND_PARTITION:
        group = _find_group(groups, r, grid.replica_count, "replica")
        return [(q, s) for q in group for s in range(grid.num_partitions)]
    group = _find_group(groups, grid.flattened(device), grid.count, "flattened device id")
    return [divmod(i, grid.num_partitions) for i in group]


def instruction_participants(instr: Instruction, grid: DeviceGrid,
                             device: Device) -> tuple[list[Device], int]:
    """(participants, this device's position) of one collective instruction."""
    mode = instruction_group_mode(instr)
    found = participants(mode, instr.attrs.replica_groups or (), grid, device)
    return found, found.index(device)


def permute_domain(instr: Instruction, grid: DeviceGrid, device: Device) -> list[Device]:
    """The devices a collective-permute's source/target ids index: partitions of this replica
    with a channel_id, replicas of this partition without one."""
    r, p = device
    if instr.attrs.channel_id:
        return [(r, q) for q in range(grid.num_partitions)]
    return [(q, p) for q in range(grid.replica_count)]


# Collectives that run over participant groups (collective-permute is point-to-point).
_GROUPED = frozenset({O.ALL_REDUCE, O.ALL_REDUCE_START, O.ALL_GATHER, O.ALL_GATHER_START,
                      O.REDUCE_SCATTER, O.ALL_TO_ALL, O.COLLECTIVE_BROADCAST})


def group_partitions(module, grid: DeviceGrid) -> list[tuple[tuple[int, ...], ...]]:
    """Every distinct way the module's collectives split the devices into groups: for each,
    the groups of global device ids in participant order. The order is a function of the
    module alone, so every process derives the same list (what a transport creates its
    sub-communicators from, collectively, before the first collective)."""
    found: dict[tuple[tuple[int, ...], ...], None] = {}
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode not in _GROUPED:
                continue
            groups: list[tuple[int, ...]] = []
            for d in grid.devices():
                ids = tuple(grid.device_id(x) for x in instruction_participants(instr, grid, d)[0])
                if ids not in groups:
                    groups.append(ids)
            found.setdefault(tuple(sorted(groups)), None)
    return list(found)
