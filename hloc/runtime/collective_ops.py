"""What every runtime's multi-device thunks compute, on host arrays.

`collective_leaves(instr, operands)` runs a Collective thunk's instruction for the device of
the calling thread: the reference interpreter's implementation of the instruction, which
calls `hloc.collectives.run_collective` with the thread's DeviceContext (its communicator:
in-process threads, MPI, ...). That is the one hook shared by the interpreter, the CPU
runtime, the arena executor and both CUDA runtimes (host-staged). `device_number(axis)` is
what a DeviceId thunk writes.
"""

from __future__ import annotations

import numpy as np

from ..collectives import current
from ..ir import Instruction
from .interpreter import evaluate_computation, registry


def private_copy(value):
    """`value` (arrays, tuples of them, None) copied: peers of an in-process communicator may
    read what this device sends after it has gone on and overwritten its buffers."""
    if isinstance(value, tuple):
        return tuple(private_copy(v) for v in value)
    return None if value is None else np.array(value, copy=True)


def _flatten(value, out: list) -> list:
    if isinstance(value, tuple):
        for v in value:
            _flatten(v, out)
    elif value is not None:
        out.append(np.asarray(value))
    return out


def collective_leaves(instr: Instruction, operands: list) -> list[np.ndarray]:
    """The array leaves of collective `instr`'s result (depth-first) on this thread's device,
    from its operand values (structured like the operands; copied here)."""
    impl = registry.lookup(instr)
    value = impl(registry.Context(evaluate_computation), instr, [private_copy(v) for v in operands])
    return _flatten(value, [])


def device_number(axis: str) -> np.ndarray:
    """This thread's partition ("partition") or replica ("replica") number as a u32 scalar."""
    replica, partition = current().device
    return np.array(partition if axis == "partition" else replica, np.uint32)
