"""Loading a bundle for execution: `hloc.runtime.load(path, device)` → an Executable.

Devices are a registry: each maps a bundle to an Executable with `run(args) -> list[ndarray]`
and `run_profiled(args) -> (outputs, [ProfileRow])`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from ..errors import InputError
from ..registry import Registry
from ..util.record import dataclass

# device name -> (targets it can run, factory(bundle) -> Executable); the device modules
# register themselves (heavy imports stay lazy inside them) and are imported on first lookup.
DEVICES: Registry[str, tuple[frozenset[str], Callable]] = Registry("device", modules=(
    "hloc.runtime.cpu", "hloc.runtime.cuda.driver", "hloc.runtime.cuda.emulated"))


def register_device(name: str, targets: frozenset[str]):
    """Register `factory(bundle) -> Executable` as device `name`, running bundles of `targets`."""
    def add(factory):
        DEVICES.add(name, (targets, factory))
        return factory

    return add


@dataclass
class ProfileRow:
    """Time spent in one thunk (or, on the interpreter, one entry instruction)."""

    name: str
    kind: str
    ops: str
    count: int = 0
    seconds: float = 0.0
    bytes: int = 0  # bytes moved, for copy rows (GPU uploads and downloads)


def default_device(target: str) -> str:
    return {"interpreter": "interpreter", "cpu": "cpu", "cuda": "cuda"}.get(target, target)


def load(path: str, device: str | None = None, *, trusted_keys: list[str] | None = None):
    """Read and check a bundle, then prepare it on `device` (default: the bundle's target).
    With `trusted_keys` (key files), a bundle not signed by one of them is refused first."""
    from ..bundle import read_bundle
    from ..bundle.validate import validate_bundle

    DEVICES.load()
    bundle = read_bundle(path)
    if trusted_keys:
        from ..bundle.signing import verify_bundle

        verify_bundle(bundle, trusted_keys)
    validate_bundle(bundle)  # members sound and bound together, before any device uses one
    target = bundle.manifest["target"]["kind"]
    device = device or default_device(target)
    if device not in DEVICES:
        raise InputError(f"unknown device '{device}' (choose from {', '.join(sorted(DEVICES))})")
    targets, factory = DEVICES.lookup(device)
    if target not in targets:
        raise InputError(f"bundle was compiled for target '{target}' and cannot run on device "
                         f"'{device}' (it runs on: {', '.join(d for d, (t, _) in sorted(DEVICES.items()) if target in t)})",
                         path)
    if device != "interpreter" and _device_count(bundle) > 1:
        from .spmd_bundles import SpmdBundleExecutable  # all devices in this process

        return SpmdBundleExecutable(bundle, device, factory)
    return factory(bundle)


def device_factory(device: str):
    """factory(bundle) -> a one-device executable of `device` (no multi-device wrapping)."""
    if device not in DEVICES:
        raise InputError(f"unknown device '{device}' (choose from {', '.join(sorted(DEVICES))})")
    return DEVICES.lookup(device)[1]


def _device_count(bundle) -> int:
    """The bundle's device count (manifest `devices`, absent for one device)."""
    return int((bundle.manifest.get("devices") or {}).get("count", 1))


class InterpreterExecutable:
    """Runs the bundle's optimized HLO on the NumPy reference interpreter."""

    device = "interpreter"

    def __init__(self, bundle, module=None):
        from ..frontend import load_bytes

        self.bundle = bundle
        self.module = module or load_bytes(bytes(bundle.module_proto),
                                           f"{bundle.path}:module.pb").module

    def run(self, args: list[np.ndarray]) -> list[np.ndarray]:
        from .interpreter import evaluate

        if self.module.config.device_count > 1:
            from .spmd import run_spmd  # all devices in this process; args are GLOBAL arrays

            return run_spmd(self.module, args)
        return evaluate(self.module, args).flatten()

    def run_profiled(self, args: list[np.ndarray]):
        """Evaluate the entry computation instruction by instruction, timing each."""
        from ..ir import Opcode
        from .interpreter import evaluate_computation, registry, to_literal, to_value

        entry = self.module.entry
        values: dict[int, object] = {}
        rows: list[ProfileRow] = []
        ctx = registry.Context(evaluate_computation)
        params = entry.parameters
        for p, a in zip(params, args, strict=True):
            values[id(p)] = to_value(p.shape, a)
        for instr in entry.post_order():
            if instr.opcode == Opcode.PARAMETER:
                continue
            start = time.perf_counter()
            values[id(instr)] = registry.lookup(instr)(ctx, instr, [values[id(o)] for o in instr.operands])
            rows.append(ProfileRow(instr.name, instr.opcode.value, instr.name, 1, time.perf_counter() - start))
        return to_literal(entry.result_shape, values[id(entry.root)]).flatten(), rows


register_device("interpreter", frozenset({"interpreter", "cpu", "cuda"}))(InterpreterExecutable)
