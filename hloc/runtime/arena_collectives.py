"""The arena executor's multi-device thunks: collectives through the thread's communicator
(hloc.runtime.collective_ops) and partition-id / replica-id, on the arena's bytes."""

from __future__ import annotations

from ..ir import Shape
from ..thunks.base import ThunkKind
from .arena import RUNNERS, ArenaExecutor
from .collective_ops import collective_leaves, device_number


@RUNNERS.register(ThunkKind.COLLECTIVE)
def _collective(ex: ArenaExecutor, thunk) -> None:
    instr = ex.instructions[thunk.name]
    results = collective_leaves(instr, ex.operand_values(instr, thunk.reads()))
    for (_, leaf), s, value in zip(_array_leaves(instr.shape), thunk.writes(), results,
                                   strict=True):
        ex.arena.write(leaf, value, [s])


@RUNNERS.register(ThunkKind.DEVICE_ID)
def _device_id(ex: ArenaExecutor, thunk) -> None:
    ex.arena.write(Shape.scalar("u32"), device_number(thunk.axis), [thunk.output])


def _array_leaves(shape: Shape):
    return [(i, leaf) for i, leaf in shape.leaves() if leaf.is_array]
