"""Multi-device thunks: collectives and the device's own ids, shared by every program format.

A `Collective` runs one collective instruction (all-reduce, all-gather, reduce-scatter,
all-to-all, collective-permute, collective-broadcast, an async `-start` / `-done`, or an
`async-start` / `-update` / `-done` wrapping one of them) on this device's buffers: the
runtime reads the operands, exchanges them through the communicator of the thread's
`hloc.collectives.DeviceContext` and writes the results. Groups, reducers and dimensions come
from the HLO instruction (`hloc.collectives.run_collective`), so the thunk repeats only the
opcode, for readers. Async pairs execute at the start; the done copies the start's result.

Outputs never share bytes with operands (buffer assignment shares operands with elementwise
ops and sorts only), and a runtime copies operands before handing them to a communicator,
because a peer thread may read them after this device has moved on.

A `DeviceId` is partition-id or replica-id: it writes the running device's number (u32).
"""

from __future__ import annotations

from typing import ClassVar

from ..buffers.assignment import Slice
from ..util.record import dataclass
from .base import Slices, Thunk, ThunkKind


@dataclass(frozen=True)
class Collective(Thunk):
    """Collective instruction `name` (opcode `op`) from `operands` into `outputs`."""

    kind: ClassVar[ThunkKind] = ThunkKind.COLLECTIVE
    op: str
    operands: Slices
    outputs: Slices

    def reads(self) -> Slices:
        return self.operands

    def writes(self) -> Slices:
        return self.outputs


@dataclass(frozen=True)
class DeviceId(Thunk):
    """partition-id (axis "partition") or replica-id (axis "replica") into `output` (u32)."""

    kind: ClassVar[ThunkKind] = ThunkKind.DEVICE_ID
    axis: str
    output: Slice

    def writes(self) -> Slices:
        return (self.output,)


MULTI_DEVICE_KINDS: dict[ThunkKind, type[Thunk]] = {Collective.kind: Collective,
                                                     DeviceId.kind: DeviceId}
