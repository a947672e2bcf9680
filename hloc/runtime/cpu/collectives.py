"""CPU steps for multi-device thunks: collectives and partition-id / replica-id.

A collective step reads its operands from the arena, runs the instruction through the
communicator of the thread's DeviceContext (hloc.runtime.collective_ops) and writes the
results into its output slices; a device-id step writes the thread's partition or replica
number. Both look the device up when they run, not when the bundle is loaded, so one
executable per device may be built anywhere and run on its device's thread.
"""

from __future__ import annotations

import numpy as np

from ...thunks.base import ThunkKind
from ..collective_ops import collective_leaves, device_number
from .host import _cells, _leaves, _read_only, _value
from .program import LoadContext, Step, builds


@builds(ThunkKind.COLLECTIVE)
def build_collective(ctx: LoadContext, thunk) -> Step:
    instr = ctx.instruction(thunk.name)
    pending = list(thunk.reads())
    operands = [_cells(ctx, op.shape, pending, _read_only) for op in instr.operands]
    outputs = _leaves(_cells(ctx, instr.shape, list(thunk.writes())), [])

    def run() -> None:
        results = collective_leaves(instr, [_value(c) for c in operands])
        for cell, value in zip(outputs, results, strict=True):
            np.copyto(cell.a, value.astype(cell.a.dtype, copy=False))

    return Step(thunk.name, "collective", f"{thunk.name} ({thunk.op})", run)


@builds(ThunkKind.DEVICE_ID)
def build_device_id(ctx: LoadContext, thunk) -> Step:
    cell = ctx.memory.cell(thunk.output, ctx.instruction(thunk.name).shape)
    axis = thunk.axis

    def run() -> None:
        cell.a[...] = device_number(axis)

    return Step(thunk.name, "device-id", f"{thunk.name} ({axis}-id)", run)
