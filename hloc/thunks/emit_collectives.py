"""Thunk emission for multi-device instructions: collectives and partition-id / replica-id.

Every collective (and each half of an async pair) becomes one `Collective` thunk reading all
operand leaves and writing all result leaves: a `-start` runs the collective and writes its
whole (operands, results, context) tuple, a `-done` copies the results out of that tuple.
`async-start` / `-update` / `-done` are collectives when the wrapped computation holds one;
other async ops keep the default (Kernel) emission.
"""

from __future__ import annotations

from ..ir import Instruction
from ..ir.opcodes import Opcode as O  # noqa: N817 - the opcode tables' usual alias
from .collectives import Collective, DeviceId
from .emit import EMITTERS, Emitter, _kernel
from .thunks import Thunk

COLLECTIVE_OPCODES = frozenset({
    O.ALL_REDUCE, O.ALL_REDUCE_START, O.ALL_REDUCE_DONE, O.ALL_GATHER, O.ALL_GATHER_START,
    O.ALL_GATHER_DONE, O.REDUCE_SCATTER, O.ALL_TO_ALL, O.COLLECTIVE_PERMUTE,
    O.COLLECTIVE_PERMUTE_START, O.COLLECTIVE_PERMUTE_DONE, O.COLLECTIVE_BROADCAST})
_ASYNC = (O.ASYNC_START, O.ASYNC_UPDATE, O.ASYNC_DONE)


def wraps_collective(instr: Instruction) -> bool:
    """An async-start/-update/-done whose wrapped computation runs a collective."""
    while instr.opcode in (O.ASYNC_UPDATE, O.ASYNC_DONE):
        instr = instr.operands[0]
    if instr.opcode != O.ASYNC_START:
        return False
    return any(i.opcode in COLLECTIVE_OPCODES for c in instr.called for i in c.instructions)


@EMITTERS.register(*COLLECTIVE_OPCODES)
def _collective(e: Emitter, instr: Instruction) -> Thunk:
    return Collective(instr.name, instr.opcode.value, e.operands(instr), e.outputs(instr))


@EMITTERS.register(*_ASYNC)
def _async(e: Emitter, instr: Instruction) -> Thunk:
    return _collective(e, instr) if wraps_collective(instr) else _kernel(e, instr)


@EMITTERS.register(O.PARTITION_ID, O.REPLICA_ID)
def _device_id(e: Emitter, instr: Instruction) -> Thunk:
    axis = "partition" if instr.opcode == O.PARTITION_ID else "replica"
    return DeviceId(instr.name, axis, e.slice(instr))
