"""Multi-device thunks of a GPU program, host-staged: a collective downloads its operands,
exchanges them through the communicator of the thread's DeviceContext
(hloc.runtime.collective_ops) and uploads the results; partition-id / replica-id upload the
thread's number. The same code serves `--device cuda` and `cuda-emulated` (correct first;
a device-side NCCL path would replace the collective runner for `cuda`)."""

from __future__ import annotations

from ...ir import Shape
from ...thunks.base import ThunkKind
from ..collective_ops import collective_leaves, device_number
from .program import RUNNERS, GpuRunner, _read_value, to_device_bytes


@RUNNERS.register(ThunkKind.COLLECTIVE)
def _collective(r: GpuRunner, t) -> None:
    instr = r.instructions[t.name]
    pending = list(t.operands)
    operands = [_read_value(r, op.shape, pending) for op in instr.operands]
    results = collective_leaves(instr, operands)
    leaves = [leaf for _, leaf in instr.shape.leaves() if leaf.is_array]
    for leaf, s, value in zip(leaves, t.outputs, results, strict=True):
        r.device.upload(s, to_device_bytes(value, leaf))


@RUNNERS.register(ThunkKind.DEVICE_ID)
def _device_id(r: GpuRunner, t) -> None:
    r.device.upload(t.output, to_device_bytes(device_number(t.axis), Shape.scalar("u32")))
