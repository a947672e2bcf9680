"""Compiled multi-device bundles (cpu, cuda, cuda-emulated) with every device in this process.

`SpmdBundleExecutable` is what `hloc.runtime.load` returns for a bundle compiled for several
devices: one executable per device (its own arena / device memory), each run on its own
thread with that device's DeviceContext bound, all joined by an InProcessCommunicator
(hloc.runtime.spmd.run_device_threads), like the interpreter's `run_spmd`. `run` takes the
GLOBAL arguments, shards them by the parameter shardings and assembles the GLOBAL outputs
by the output shardings. Native code runs through ctypes, which releases the GIL, so device
threads progress in parallel.

One device of such a bundle is `DeviceRunner(executable, ctx)`: what a process of an MPI job
runs (hloc.runtime.native_ranks).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..collectives import DeviceContext, DeviceGrid, bind, check_partitioned
from ..collectives.groups import Device
from ..ir import Module
from .spmd import assemble_outputs, run_device_threads, shard_inputs


class DeviceExecutable(Protocol):
    """A one-device executable of a bundle (CpuExecutable, CudaExecutable, ...)."""

    module: Module

    def run(self, args: Sequence) -> list[np.ndarray]: ...

    def run_profiled(self, args: Sequence) -> tuple[list[np.ndarray], list]: ...


# factory(bundle) -> a one-device executable with run(args) and run_profiled(args)
Factory = Callable[[Any], DeviceExecutable]


class DeviceRunner:
    """One device of a multi-device bundle: `executable` run with `ctx` bound to the thread.
    `collectives`: a GPU rank's device collectives (hloc.runtime.cuda.nccl), else None."""

    def __init__(self, executable: DeviceExecutable, ctx: DeviceContext):
        self.executable, self.ctx = executable, ctx
        self.collectives: Any = None

    def run(self, args) -> list[np.ndarray]:
        bind(self.ctx)
        try:
            return self.executable.run(args)
        finally:
            bind(None)

    def run_profiled(self, args):
        bind(self.ctx)
        try:
            return self.executable.run_profiled(args)
        finally:
            bind(None)


class SpmdBundleExecutable:
    """Every device of a multi-device bundle in this process; GLOBAL arguments and outputs.

    `output_sharding_texts` overrides the module's output shardings (a module from HLO text
    does not record them); `timeout` bounds a run (a stuck collective is an error)."""

    def __init__(self, bundle, device: str, factory: Factory, *, output_sharding_texts=None,
                 output_shapes=None, timeout: float = 300.0):
        self.bundle, self.device = bundle, device
        first = factory(bundle)
        self.module = first.module
        check_partitioned(self.module)
        self.grid = DeviceGrid.of(self.module.config)
        devices = self.grid.devices()
        # An executable whose compiled code can serve several devices makes `sibling`s.
        more: Callable[[], DeviceExecutable] = (getattr(first, "sibling", None)
                                                 or (lambda: factory(bundle)))
        self.executables: dict[Device, DeviceExecutable] = {
            d: first if i == 0 else more() for i, d in enumerate(devices)}
        self.output_sharding_texts = output_sharding_texts
        self.output_shapes = output_shapes
        self.timeout = timeout

    def run_devices(self, per_device_args: Mapping[Device, Sequence]) -> dict[Device, list]:
        """Each device's flattened outputs from each device's own arguments."""
        def run_one(ctx: DeviceContext, args) -> list:
            return self.executables[ctx.device].run(args)

        return run_device_threads(self.grid, run_one, per_device_args, self.timeout)

    def run(self, args) -> list[np.ndarray]:
        results = self.run_devices(shard_inputs(self.module, args))
        return assemble_outputs(self.module, results, output_sharding_texts=self.output_sharding_texts,
                                output_shapes=self.output_shapes)

    def run_profiled(self, args):
        """(GLOBAL outputs, device 0's ProfileRows: collective thunks include their waits)."""
        rows: dict[Device, list] = {}

        def run_one(ctx: DeviceContext, a) -> list:
            outs, rows[ctx.device] = self.executables[ctx.device].run_profiled(a)
            return outs

        results = run_device_threads(self.grid, run_one, shard_inputs(self.module, args),
                                     self.timeout)
        outs = assemble_outputs(self.module, results, output_sharding_texts=self.output_sharding_texts,
                                output_shapes=self.output_shapes)
        return outs, rows[self.grid.devices()[0]]
