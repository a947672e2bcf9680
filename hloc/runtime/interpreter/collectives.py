"""Collectives, partition-id and replica-id on the reference interpreter.

The device a value is computed for comes from the thread's DeviceContext (hloc.collectives):
`hloc.runtime.spmd.run_spmd` runs one thread per device; a plain `evaluate` is device (0, 0)
of a one-device grid, where every collective's group is that device alone.
"""

from __future__ import annotations

import numpy as np

from hloc.ir.opcodes import Opcode as O

from ...collectives import current, run_collective
from .registry import impl


@impl(O.PARTITION_ID)
def partition_id(ctx, instr, ops):
    return np.array(current().device[1], np.uint32)


@impl(O.REPLICA_ID)
def replica_id(ctx, instr, ops):
    return np.array(current().device[0], np.uint32)


@impl(O.ALL_REDUCE, O.ALL_REDUCE_START, O.ALL_GATHER, O.REDUCE_SCATTER, O.ALL_TO_ALL,
      O.COLLECTIVE_PERMUTE, O.COLLECTIVE_BROADCAST)
def collective(ctx, instr, ops):
    return run_collective(instr, ops)


def _zeros(shape):
    if shape.is_tuple:
        return tuple(_zeros(s) for s in shape.tuple_shapes)
    return np.zeros(shape.dims, shape.np_dtype) if shape.is_array else None


def _start_tuple(instr, operands, result):
    """An async start's value: (operands, result, context...) shaped like the instruction."""
    rest = [_zeros(s) for s in instr.shape.tuple_shapes[2:]]
    return (operands, result, *rest)


@impl(O.ALL_GATHER_START, O.COLLECTIVE_PERMUTE_START)
def collective_start(ctx, instr, ops):
    operands = ops[0] if len(ops) == 1 else tuple(ops)
    return _start_tuple(instr, operands, run_collective(instr, ops))


@impl(O.ASYNC_START)
def async_start(ctx, instr, ops):
    # The wrapped computation holds the collective; running it now is a valid schedule.
    return _start_tuple(instr, tuple(ops), ctx.call(instr.called[0], list(ops)))


@impl(O.ALL_GATHER_DONE, O.COLLECTIVE_PERMUTE_DONE, O.ASYNC_DONE)
def collective_done(ctx, instr, ops):
    return ops[0][1]


@impl(O.ALL_REDUCE_DONE, O.ASYNC_UPDATE)
def passthrough(ctx, instr, ops):
    return ops[0]
