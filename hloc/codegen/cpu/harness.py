"""Run emitted kernels on numpy arrays (tests, tools, and a reference for the runtime).

Arrays are logical (numpy row-major); they are laid out in each shape's layout before the
call and read back after it.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...ir import Shape
from .. import llvm
from ..elemental.memory import major_to_minor
from .emit import EmittedKernels, emit_kernels
from .kernel_spec import KernelSpec

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def to_physical(array: np.ndarray, shape: Shape) -> np.ndarray:
    """A contiguous array holding `array`'s elements in `shape`'s memory order."""
    arr = np.asarray(array).astype(shape.np_dtype, copy=False).reshape(shape.dims)
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one)
    return np.array(np.transpose(arr, major_to_minor(shape)), order="C")


def from_physical(physical: np.ndarray, shape: Shape) -> np.ndarray:
    order = major_to_minor(shape)
    return np.array(np.transpose(physical, np.argsort(order).astype(int)), order="C")


class LoadedKernels:
    """An emitted kernel object loaded into this process."""

    def __init__(self, emitted: EmittedKernels, target=None):
        self.emitted = emitted
        self.library = llvm.JitLibrary(emitted.object_code, target)
        self._fns: dict[str, object] = {}

    def function(self, name: str):
        fn = self._fns.get(name)
        if fn is None:
            fn = KERNEL_TYPE(self.library.address(name))
            self._fns[name] = fn
        return fn

    def call(self, name: str, buffers: list[np.ndarray], begin: int = 0,
             end: int | None = None) -> None:
        """Call kernel `name` on contiguous physical buffers (operands then outputs)."""
        info = self.emitted.metadata.kernels[name]
        end = info.parallel_extent if end is None else end
        ptrs = (ctypes.c_void_p * max(1, len(buffers)))(*[b.ctypes.data for b in buffers])
        self.function(name)(ctypes.cast(ptrs, ctypes.c_void_p), begin, end)

    def run(self, spec: KernelSpec, inputs: list[np.ndarray], *, chunks: int = 1,
            initial_outputs: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Run `spec` on logical arrays, returning logical outputs.

        `chunks` > 1 splits the unit range into that many calls (as threads would);
        aliased outputs start as copies of their operands (in-place kernels update them).
        """
        ops = [to_physical(a, s) for a, s in zip(inputs, spec.operand_shapes, strict=True)]
        outs = [np.zeros([s.dims[d] for d in major_to_minor(s)], s.np_dtype)
                for s in spec.output_shapes]
        if initial_outputs is not None:
            outs = [to_physical(a, s) for a, s in zip(initial_outputs, spec.output_shapes,
                                                       strict=True)]
        for out_index, operand_index in spec.aliases:
            outs[out_index] = ops[operand_index]  # the same memory
        extent = self.emitted.metadata.kernels[spec.name].parallel_extent
        bounds = np.linspace(0, extent, chunks + 1).astype(np.int64)
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            self.call(spec.name, ops + outs, int(lo), int(hi))
        return [from_physical(o, s) for o, s in zip(outs, spec.output_shapes, strict=True)]


def run_specs(specs: list[KernelSpec], inputs: list[list[np.ndarray]], target=None,
              opt_level: int = 2, chunks: int = 1) -> list[list[np.ndarray]]:
    """Emit, load and run several kernels once each (convenience for tests)."""
    from ..target import host_target

    target = target or host_target()
    loaded = LoadedKernels(emit_kernels(specs, target, opt_level), target)
    return [loaded.run(s, i, chunks=chunks) for s, i in zip(specs, inputs, strict=True)]
