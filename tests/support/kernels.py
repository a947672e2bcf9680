"""CPU kernels in tests, without a bundle: the entry computation of small modules emitted
as kernels of the emitter's ABI (hloc/codegen/cpu/kernel_spec.py) into one object, JIT-loaded and
called on numpy arrays. Compiling many cases into one object pays LLVM's fixed cost once.

Arrays are logical (numpy row-major); they are laid out in each shape's layout before the
call and read back after it.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from llvmlite import ir

from hloc.codegen import llvm
from hloc.codegen.cpu.compile import compile_llvm, emit_spec
from hloc.codegen.cpu.kernel_spec import KernelInfo, KernelSpec
from hloc.codegen.elemental.memory import major_to_minor
from hloc.codegen.target import host_target
from hloc.errors import InputError
from hloc.ir import Computation, Module, Shape
from hloc.ir.text.parser import parse_module
from hloc.runtime.interpreter import evaluate_computation

from .values import assert_matches, random_inputs

# ---- emitting ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelModuleInfo:
    """Metadata of an emitted kernel object: per-kernel facts plus the later compile stages."""

    kernels: dict[str, KernelInfo]
    target: dict
    opt_level: int
    optimized_ir: str = field(repr=False, default="")
    assembly: str | None = field(repr=False, default=None)

    def to_json(self) -> dict:
        return {"target": self.target, "opt_level": self.opt_level,
                "kernels": [k.to_json() for k in self.kernels.values()]}


class EmittedKernels(NamedTuple):
    llvm_ir: str
    object_code: bytes | list[bytes]  # one object, or one per partition (llvm_split)
    metadata: KernelModuleInfo


def build_llvm_module(specs: list[KernelSpec], target, name: str = "hloc_kernels", *,
                      compact: bool | None = None):
    """The unoptimized LLVM module (llvmlite.ir) for `specs`, each kernel's info, and the
    names of the small loop-free kernels' functions: emitted and marked as `hloc compile`
    emits them (codegen/cpu/compile.py emit_spec; `compact` as there, None: by their work)."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise InputError(f"duplicate kernel names in {sorted(names)}")
    module = ir.Module(name=name)
    module.triple = target.triple
    module.data_layout = target.data_layout
    light: set[str] = set()
    infos = {s.name: emit_spec(module, s, target, light, compact=compact) for s in specs}
    return module, infos, frozenset(light)


def emit_kernels(specs, target, opt_level: int = 2, *, assembly: bool = False) -> EmittedKernels:
    """Emit, optimize and compile `specs` as `hloc compile` does: the module cut into
    partitions (small kernels scalar, small loop-free ones with the light passes), one
    relocatable object each."""
    module, infos, light = build_llvm_module(list(specs), target)
    text = str(module)
    compiled = compile_llvm(text, target, opt_level, assembly, light=light)
    asm = "".join(c.assembly or "" for c in compiled) if assembly else None
    meta = KernelModuleInfo(infos, target.describe(), opt_level,
                            "".join(c.optimized_ir for c in compiled), asm)
    objects = [c.object_code for c in compiled]
    return EmittedKernels(text, objects[0] if len(objects) == 1 else objects, meta)


# ---- loading and calling -----------------------------------------------------------------------

KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def asm_function(asm: str, name: str) -> str:
    """The assembly of function `name` in an LLVM assembly listing (up to its end label)."""
    start = asm.index(f"\n{name}:")
    return asm[start:asm.index(".Lfunc_end", start)]


def fma_loop_blocks(asm: str, name: str, mr: int) -> list[str]:
    """The basic blocks of function `name` with at least 2 x `mr` ymm fused multiply-adds: the
    k loop of an AVX2 tile kernel of `mr` rows (two 8-float columns), or an unrolled multiple."""
    return [blk for blk in re.split(r"\n\.LBB\w+:", asm_function(asm, name))
            if len(re.findall(r"vfmadd231ps\s+%ymm", blk)) >= 2 * mr]


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
    target = target or host_target()
    loaded = LoadedKernels(emit_kernels(specs, target, opt_level), target)
    return [loaded.run(s, i, chunks=chunks) for s, i in zip(specs, inputs, strict=True)]


# ---- one module's entry as a kernel -----------------------------------------------------------

def entry_spec(module: Module, name: str = "kernel") -> KernelSpec:
    """The whole entry computation as one kernel (it is treated like a fused computation)."""
    return computation_spec(module.entry, name)


def computation_spec(comp: Computation, name: str) -> KernelSpec:
    params = comp.parameters
    return KernelSpec(name, comp, (comp.name,), tuple(p.shape for p in params),
                      tuple(s for _, s in comp.root.shape.leaves()))


class Compiled:
    """Kernels for some computations of one module, emitted into one object and loaded."""

    def __init__(self, specs: list[KernelSpec], opt_level: int = 2, target=None):
        self.specs = {s.name: s for s in specs}
        self.target = target or host_target()
        self.emitted = emit_kernels(specs, self.target, opt_level)
        self.loaded = LoadedKernels(self.emitted, self.target)

    def run(self, name: str, inputs, chunks: int = 1) -> list[np.ndarray]:
        return self.loaded.run(self.specs[name], list(inputs), chunks=chunks)


def entries_against_reference(cases: dict, tol: float, chunks=(1, 3)) -> dict:
    """Every case's (module, inputs) entry compiled into one object, run whole and split in
    each of `chunks` parts; each run's first output within `tol` of the interpreter's.
    Returns {case: (outputs of the last run, the interpreter's)}."""
    compiled = Compiled([entry_spec(m, name) for name, (m, _) in cases.items()])
    out = {}
    for name, (module, args) in cases.items():
        want = reference(module.entry, args)
        for parts in chunks:
            got = compiled.run(name, args, chunks=parts)
            np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol, err_msg=name)
        out[name] = (got, want)
    return out


def reference(comp: Computation, inputs) -> list[np.ndarray]:
    value = evaluate_computation(comp, [np.asarray(a) for a in inputs])
    if isinstance(value, tuple):
        from hloc.codegen.elemental.compose import flatten

        return [np.asarray(v) for v in flatten(value)]
    return [np.asarray(value)]


def check_hlo(text: str, inputs=None, *, rtol: float = 0.0, atol: float = 0.0, seed: int = 0,
              chunks: int = 1, opt_level: int = 2) -> list[np.ndarray]:
    """Compile the entry of `text` as one kernel, run it, compare with the interpreter."""
    module = parse_module(text)
    spec = entry_spec(module)
    inputs = random_inputs(module.entry, seed) if inputs is None else inputs
    got = Compiled([spec], opt_level).run(spec.name, inputs, chunks=chunks)
    want = reference(module.entry, inputs)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_matches(g, w, rtol=rtol, atol=atol, what=f"output {i}")
    return got
