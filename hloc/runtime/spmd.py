"""Run a multi-device module on the reference interpreter, all devices in one process.

`run_spmd(module, global_inputs)` shards each GLOBAL input by its parameter's sharding, runs
one thread per device (replica, partition) with an InProcessCommunicator rendezvous for every
collective, and assembles the GLOBAL outputs from the output sharding: the oracle for every
multi-device backend. `run_devices` is the same run on per-device arguments, and
`run_device_threads` the same with any per-device runner (compiled bundles:
hloc.runtime.spmd_bundles).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..collectives import (
    CollectiveError,
    DeviceContext,
    DeviceGrid,
    InProcessCommunicator,
    Sharding,
    assemble,
    bind,
    check_partitioned,
    parse_sharding,
    shard,
)
from ..collectives.groups import Device
from ..errors import InputError
from ..ir import Literal, Module


def _leaves(lit: Literal) -> list[np.ndarray]:
    if lit.shape.is_tuple:
        return [leaf for e in lit.elements for leaf in _leaves(e)]
    return [np.asarray(lit.array)]


# run_one(ctx, args) -> a device's flattened outputs, called on that device's thread with
# `ctx` bound (hloc.collectives.bind), so every collective it runs finds its communicator.
DeviceRun = Callable[[DeviceContext, Sequence], list]


def _interpret(module: Module) -> DeviceRun:
    def run_one(ctx: DeviceContext, args) -> list:
        from .interpreter import evaluate

        return _leaves(evaluate(module, args))
    return run_one


def _device_thread(run_one: DeviceRun, ctx: DeviceContext, comm: InProcessCommunicator, args,
                   results: dict, errors: dict) -> None:
    """`ctx`'s device on this thread; `comm` is `ctx.comm`, the rendezvous told when the device
    finishes or fails."""
    bind(ctx)
    try:
        results[ctx.device] = [np.asarray(r) for r in run_one(ctx, args)]
        comm.finish(ctx.device_id)
    except BaseException as e:  # noqa: BLE001 - reported for the device, re-raised by the caller
        errors[ctx.device] = e
        comm.abort(ctx.device_id, e)
    finally:
        bind(None)


def run_device_threads(grid: DeviceGrid, run_one: DeviceRun,
                       per_device_args: Mapping[Device, Sequence],
                       timeout: float = 300.0) -> dict[Device, list[np.ndarray]]:
    """Each device's flattened outputs: `run_one` on one thread per device of `grid`, the
    threads joined by an InProcessCommunicator. The first device's own error is raised (not
    its peers' "device N failed" aborts); a run longer than `timeout` is a CollectiveError."""
    comm = InProcessCommunicator([grid.device_id(d) for d in grid.devices()], timeout)
    results: dict[Device, list] = {}
    errors: dict[Device, BaseException] = {}
    threads = [threading.Thread(target=_device_thread, name=f"hloc-device-{d}", daemon=True,
                                args=(run_one, DeviceContext(grid, d, comm), comm,
                                      per_device_args[d], results, errors))
               for d in grid.devices()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    if any(t.is_alive() for t in threads):
        raise CollectiveError(f"devices still running after {timeout:g} s")
    if errors:
        own = [e for e in errors.values() if not isinstance(e, CollectiveError)]
        raise (own or list(errors.values()))[0]
    return results


def run_devices(module: Module, per_device_args: Mapping[Device, Sequence],
                timeout: float = 300.0) -> dict[Device, list[np.ndarray]]:
    """Each device's flattened outputs, from each device's own arguments (interpreter)."""
    return run_device_threads(DeviceGrid.of(module.config), _interpret(module), per_device_args,
                              timeout)


def parameter_shardings(module: Module) -> list[Sharding]:
    """Each entry parameter's sharding: the module's spmd_parameters_shardings, else the
    parameter's own sharding attribute, else replicated."""
    params = module.entry.parameters
    texts: Sequence[str] = module.config.spmd_parameter_shardings
    if texts is None or len(texts) != len(params):
        texts = [p.attrs.sharding for p in params]
    return [parse_sharding(t) for t in texts]


def output_shardings(module: Module, given=None) -> list[Sharding]:
    """The flattened outputs' shardings: `given` (texts), the module's spmd_output_sharding,
    the root's sharding attribute, else replicated."""
    if given is not None:
        return [parse_sharding(t) for t in given]
    text = module.config.spmd_output_sharding or module.entry.root.attrs.sharding
    root = module.entry.result_shape
    count = len(root.tuple_shapes) if root.is_tuple else 1
    leaves = parse_sharding(text).leaves() if text else []
    return leaves if len(leaves) == count else [parse_sharding(None)] * count


def shard_inputs(module: Module, global_inputs: Sequence[np.ndarray]) -> dict[Device, list]:
    """Each device's arguments: its shard of every GLOBAL input, checked against the module."""
    grid = DeviceGrid.of(module.config)
    params = module.entry.parameters
    if len(global_inputs) != len(params):
        raise InputError(f"module {module.name} takes {len(params)} arguments, "
                         f"got {len(global_inputs)}")
    in_sh = parameter_shardings(module)
    per_device = {}
    for d in grid.devices():
        args = [shard(np.asarray(x), s, d[1]) for x, s in zip(global_inputs, in_sh, strict=True)]
        for p, a in zip(params, args, strict=True):
            if tuple(a.shape) != tuple(p.shape.dims):
                raise InputError(f"parameter {p.name}: device {d} gets a {list(a.shape)} shard "
                                 f"of the global input, the module wants {list(p.shape.dims)}")
        per_device[d] = args
    return per_device


def assemble_outputs(module: Module, results: dict[Device, list], *, output_sharding_texts=None,
                     output_shapes=None) -> list[np.ndarray]:
    """GLOBAL outputs from each device's flattened outputs (replica 0's partitions)."""
    grid = DeviceGrid.of(module.config)
    outs = []
    for i, s in enumerate(output_shardings(module, output_sharding_texts)):
        parts = [results[(0, p)][i] for p in range(grid.num_partitions)]
        outs.append(assemble(parts, s, output_shapes[i] if output_shapes else None))
    return outs


def global_signature(signature, module: Module):
    """`signature` (hloc.runtime.io.Signature, per-device shapes) with the GLOBAL shapes a
    user passes and gets: each per-device shape times its sharding's tile counts. (An uneven
    sharding's padding cannot be told from the bundle; such inputs are padded shards.)"""
    import dataclasses

    def widen(specs, shardings):
        return tuple(dataclasses.replace(t, shape=tuple(
            n * c for n, c in zip(t.shape, s.tile_counts(len(t.shape)), strict=True)))
            for t, s in zip(specs, shardings, strict=True))

    return dataclasses.replace(
        signature, parameters=widen(signature.parameters, parameter_shardings(module)),
        results=widen(signature.results, output_shardings(module)))


def run_spmd(module: Module, global_inputs: Sequence[np.ndarray], *, output_sharding_texts=None,
             output_shapes=None, timeout: float = 300.0) -> list[np.ndarray]:
    """GLOBAL outputs (flattened) of a partitioned module on GLOBAL inputs."""
    check_partitioned(module)
    results = run_devices(module, shard_inputs(module, global_inputs), timeout)
    return assemble_outputs(module, results, output_sharding_texts=output_sharding_texts,
                            output_shapes=output_shapes)
