"""Multi-device thunks of a GPU program. A collective the runner's device collectives planned
(hloc.runtime.cuda.nccl: NCCL on `--device cuda`, its MPI model on `cuda-emulated`, for
MPI ranks) runs as NCCL calls on device pointers. Every other collective is host-staged: it
downloads its operands, exchanges them through the communicator of the thread's
DeviceContext (hloc.runtime.collective_ops) and uploads the results. partition-id /
replica-id upload the thread's number."""

from __future__ import annotations

from ...ir import Shape
from ...thunks.base import ThunkKind
from ..collective_ops import collective_leaves, device_number
from .program import RUNNERS, GpuRunner, _read_value, to_device_bytes


@RUNNERS.register(ThunkKind.COLLECTIVE)
def _collective(r: GpuRunner, t) -> None:
    if r.collectives is not None and r.collectives.run(r, t):
        return
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
