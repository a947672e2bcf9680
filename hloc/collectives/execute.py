"""Run one collective instruction on one device: group resolution + communicator + semantics.

The executor is target-neutral: the reference interpreter calls it with operand arrays, and
a runtime's collective thunk can call it with its buffers. A `DeviceContext` says which device
is running (replica, partition), the grid and the communicator; it is bound per thread, so
computations nested in fusions, loops and calls see it too.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import field

import numpy as np

from hloc.errors import UnsupportedError
from hloc.ir import Instruction, Opcode
from hloc.ir.opcodes import Opcode as O

from ..util.record import dataclass
from . import semantics
from .communicator import Communicator
from .groups import Device, DeviceGrid, instruction_participants, permute_domain
from .reducers import reducer_of


class _Solo(Communicator):
    """The communicator of a one-device run: every group is this device alone."""

    def exchange(self, key, group, me, value) -> list:
        return [value]


@dataclass
class DeviceContext:
    """The device a thread runs as, and how it reaches its peers."""

    grid: DeviceGrid
    device: Device
    comm: Communicator
    _counts: Counter = field(default_factory=Counter)

    @property
    def device_id(self) -> int:
        return self.grid.device_id(self.device)

    def key(self, instr: Instruction) -> str:
        """A name for this execution of `instr`, equal on every participant (loops included)."""
        self._counts[instr.name] += 1
        return f"{instr.name}#{self._counts[instr.name]}"


_LOCAL = threading.local()
_SOLO = DeviceContext(DeviceGrid(), (0, 0), _Solo())


def bind(ctx: DeviceContext | None) -> None:
    """Make `ctx` the current device of this thread (None: the one-device default)."""
    _LOCAL.ctx = ctx


def current() -> DeviceContext:
    return getattr(_LOCAL, "ctx", None) or _SOLO


def _group(ctx: DeviceContext, instr: Instruction) -> tuple[list[int], int]:
    devices, position = instruction_participants(instr, ctx.grid, ctx.device)
    return [ctx.grid.device_id(d) for d in devices], position


def _tuple_or_one(instr: Instruction, results: list):
    return tuple(results) if instr.shape.is_tuple else results[0]


def all_reduce(ctx: DeviceContext, instr: Instruction, ops: list):
    group, _ = _group(ctx, instr)
    results = ctx.comm.all_reduce(ctx.key(instr), group, ctx.device_id, ops,
                                  reducer_of(instr.called[0]))
    return _tuple_or_one(instr, [r.astype(o.dtype, copy=False) for r, o in zip(results, ops,
                                                                                  strict=True)])


def all_gather(ctx: DeviceContext, instr: Instruction, ops: list):
    group, _ = _group(ctx, instr)
    (dim,) = instr.attrs.dimensions
    gathered = ctx.comm.all_gather(ctx.key(instr), group, ctx.device_id, ops)
    return [semantics.all_gather(vals, dim) for vals in gathered]


def reduce_scatter(ctx: DeviceContext, instr: Instruction, ops: list):
    group, position = _group(ctx, instr)
    (dim,) = instr.attrs.dimensions
    reduced = ctx.comm.all_reduce(ctx.key(instr), group, ctx.device_id, ops,
                                  reducer_of(instr.called[0]))
    pieces = [np.split(r, len(group), axis=dim)[position] for r in reduced]
    return _tuple_or_one(instr, pieces)


def all_to_all(ctx: DeviceContext, instr: Instruction, ops: list):
    group, _ = _group(ctx, instr)
    if instr.attrs.dimensions and len(ops) == 1 and not instr.shape.is_tuple:
        # Array form: piece j of the split goes to member j; what arrives is concatenated.
        (dim,) = instr.attrs.dimensions
        pieces = np.split(np.asarray(ops[0]), len(group), axis=dim)
        got = ctx.comm.all_to_all(ctx.key(instr), group, ctx.device_id, pieces)
        return np.concatenate(got, axis=dim)
    return tuple(ctx.comm.all_to_all(ctx.key(instr), group, ctx.device_id, ops))


def collective_permute(ctx: DeviceContext, instr: Instruction, ops: list):
    if len(ops) != 1:
        raise UnsupportedError(f"collective-permute %{instr.name} with {len(ops)} operands "
                               "(in-place form) is not supported")
    domain = permute_domain(instr, ctx.grid, ctx.device)
    ids = [ctx.grid.device_id(d) for d in domain]
    return ctx.comm.permute(ctx.key(instr), ids, ctx.device_id, np.asarray(ops[0]),
                            instr.attrs.source_target_pairs or ())


def collective_broadcast(ctx: DeviceContext, instr: Instruction, ops: list):
    group, _ = _group(ctx, instr)
    return _tuple_or_one(instr, ctx.comm.broadcast(ctx.key(instr), group, ctx.device_id, ops))


# Opcode -> executor(ctx, instr, operand arrays) -> result value (array or tuple).
EXECUTORS: dict[Opcode, Callable] = {
    O.ALL_REDUCE: all_reduce, O.ALL_REDUCE_START: all_reduce,
    O.ALL_GATHER: lambda c, i, ops: _tuple_or_one(i, all_gather(c, i, ops)),
    # all-gather-start's shape is (operands, results): the result part is the gathered values.
    O.ALL_GATHER_START: lambda c, i, ops: (lambda r: tuple(r) if len(r) > 1 else r[0])(
        all_gather(c, i, ops)),
    O.COLLECTIVE_PERMUTE_START: collective_permute,
    O.REDUCE_SCATTER: reduce_scatter, O.ALL_TO_ALL: all_to_all,
    O.COLLECTIVE_PERMUTE: collective_permute, O.COLLECTIVE_BROADCAST: collective_broadcast,
}


def run_collective(instr: Instruction, ops: list, ctx: DeviceContext | None = None):
    """The result of collective `instr` on this thread's device (or `ctx`)."""
    fn = EXECUTORS.get(instr.opcode)
    if fn is None:
        raise UnsupportedError(f"collective {instr.opcode.value} (%{instr.name}) is not supported")
    return fn(ctx or current(), instr, ops)
