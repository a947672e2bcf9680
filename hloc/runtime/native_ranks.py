"""One device of a compiled multi-device bundle, as one rank of an MPI job runs it.

The rank runner contract (hloc.runtime.ranks on the `dist` branch): `factory(bundle, ctx)`
returns an object whose `run(args)` / `run_profiled(args)` take THIS device's arguments (its
shards) and return its flattened outputs (and ProfileRows), where `ctx` is the
`hloc.collectives.DeviceContext` carrying the device and the communicator (MPI there, the
in-process rendezvous in tests). For cpu, cuda-emulated and cuda that object is a
`DeviceRunner`: the device's ordinary one-device executable, run with `ctx` bound to the
calling thread, so its Collective thunks reach `ctx.comm` through
`hloc.collectives.run_collective` and its DeviceId thunks read `ctx.device`. On cuda and
cuda-emulated ranks of an MPI job, collectives may run device-side instead (NCCL, or its
emulation): `hloc.runtime.cuda.nccl.attach` decides, collectively, when the runner is made.

hloc.runtime.ranks' RANK_RUNNERS registry loads this module, which registers them.
"""

from __future__ import annotations

from collections.abc import Callable

from ..collectives import DeviceContext
from .executable import device_factory
from .spmd_bundles import DeviceRunner

NATIVE_DEVICES = ("cpu", "cuda-emulated", "cuda")
GPU_DEVICES = ("cuda-emulated", "cuda")


def native_rank_runner(device: str) -> Callable[[object, DeviceContext], DeviceRunner]:
    """The rank runner factory of `device`: (bundle, ctx) -> DeviceRunner. (`module`, the
    loaded HLO a rank runner may take, is not needed: native code carries its program.)"""
    def factory(bundle, ctx: DeviceContext, module=None) -> DeviceRunner:
        runner = DeviceRunner(device_factory(device)(bundle), ctx)
        if device in GPU_DEVICES:
            from .cuda.nccl import attach

            runner.collectives = attach(runner.executable, ctx, device)
        return runner

    factory.__name__ = f"{device.replace('-', '_')}_rank"
    return factory


NATIVE_RANK_RUNNERS = {device: native_rank_runner(device) for device in NATIVE_DEVICES}


def register_native_rank_runners(register: Callable[[str], Callable]) -> None:
    """Register every native rank runner with `register(kind)(factory)` (ranks.py's decorator)."""
    for device, factory in NATIVE_RANK_RUNNERS.items():
        register(device)(factory)


def _register() -> None:
    from .ranks import register_rank_runner

    register_native_rank_runners(register_rank_runner)


_register()
