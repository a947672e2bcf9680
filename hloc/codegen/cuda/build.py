"""GPU program construction: the target-neutral thunk program → GPU thunks and kernel IR.

Each kernel is emitted into its own LLVM module as soon as it is planned; an instruction whose
kernels cannot be emitted (an op without a GPU lowering) becomes a HostCompute thunk instead,
with a note. Per-kernel modules keep the IR of one kernel independent of every other, which
the emulator relies on to rebuild and check kernels one by one. A Gemm thunk of a plain dot
also records its cuBLAS form (gemm.blas_call), which the runtime may use instead of the kernel.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from llvmlite import ir

from ...buffers.assignment import Allocation, Slice
from ...errors import UnsupportedError
from ...ir import Instruction, Module
from ...thunks import thunks as nt
from . import schedule as gt
from .gemm import blas_call
from .kernel import KernelRecipe, emit_kernel
from .parts import Part, plan_context, plan_parts
from .target import DATA_LAYOUT, TRIPLE, CudaTarget

log = logging.getLogger("hloc.codegen.cuda")


def kernel_module(name: str) -> ir.Module:
    module = ir.Module(name=name)
    module.triple = TRIPLE
    module.data_layout = DATA_LAYOUT
    return module


def emit_recipe(recipe: KernelRecipe, instr: Instruction, target) -> ir.Module:
    """The LLVM module holding kernel `recipe` (deterministic for a given recipe and HLO)."""
    module = kernel_module(recipe.name)
    emit_kernel(module, recipe, instr, target)
    return module


def ir_digest(module: ir.Module) -> str:
    return hashlib.sha256(str(module).encode()).hexdigest()


@dataclass
class GpuBuild:
    """The result of planning: the program and each kernel's LLVM module."""

    program: gt.GpuProgram
    modules: dict[str, ir.Module] = field(default_factory=dict)


class Planner:
    """Converts thunks, collecting kernel recipes and modules on the way."""

    def __init__(self, module: Module, target: CudaTarget, num_streams: int, first_scratch: int):
        self.target = target
        self.instructions = {i.name: i for c in module.computations for i in c.instructions}
        self.recipes: list[KernelRecipe] = []
        self.modules: dict[str, ir.Module] = {}
        self.names: set[str] = set()
        self.notes: list[str] = []
        self.scratch_bytes = 0
        self.num_streams = num_streams
        self.first_scratch = first_scratch

    def instr(self, name: str) -> Instruction:
        return self.instructions[name]

    def sequence(self, thunks, stream: int) -> tuple[gt.GpuThunk, ...]:
        return tuple(self.convert(t, stream) for t in thunks)

    def convert(self, thunk: nt.Thunk, stream: int) -> gt.GpuThunk:
        return CONVERTERS.get(thunk.kind, _host)(self, thunk, stream)

    def symbol(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name)
        base = base if base[:1].isalpha() or base[:1] == "_" else f"k_{base}"
        sym, n = base, 1
        while sym in self.names:
            sym, n = f"{base}_{n}", n + 1
        self.names.add(sym)
        return sym

    def launches(self, thunk_name: str, instr: Instruction, parts: list[Part], args,
                 stream: int) -> gt.GpuThunk | None:
        """Kernel thunks for `parts` (None if a kernel cannot be emitted)."""
        made: list[tuple[KernelRecipe, ir.Module, Part]] = []
        for k, part in enumerate(parts):
            recipe = KernelRecipe(self.symbol(instr.name if len(parts) == 1 else
                                              f"{instr.name}_{k}"), part.variant, instr.name,
                                  part.items, part.params,
                                  part.block_threads or part.launch.threads_per_block,
                                  part.scratch_bytes)
            try:
                made.append((recipe, emit_recipe(recipe, instr, self.target), part))
            except UnsupportedError as e:
                log.info("no GPU kernel for %%%s: %s", instr.name, e)
                self.notes.append(f"%{instr.name} runs on the host: {e}")
                return None
        thunks = [self._launch(thunk_name, r, m, p, args, stream) for r, m, p in made]
        return thunks[0] if len(thunks) == 1 else gt.Sequential(thunk_name, tuple(thunks))

    def _launch(self, thunk_name, recipe, module, part, args, stream) -> gt.Kernel:
        self.recipes.append(recipe)
        self.modules[recipe.name] = module
        args = tuple(args)
        if part.scratch_bytes:
            self.scratch_bytes = max(self.scratch_bytes, part.scratch_bytes)
            args += (Slice(self.first_scratch + stream, 0, part.scratch_bytes),)
        common = dict(kernel=recipe.name, variant=recipe.variant, grid=part.launch.grid,
                      block=part.launch.block, shared_bytes=part.shared_bytes, args=args)
        if part.gemm is not None:
            batch, m, n, k = part.gemm
            return gt.Gemm(thunk_name, **common, batch=batch, m=m, n=n, k=k)
        return gt.Kernel(thunk_name, **common)


Converter = Callable[[Planner, nt.Thunk, int], gt.GpuThunk]
CONVERTERS: dict[str, Converter] = {}


def converts(*kinds: str):
    def register(fn: Converter) -> Converter:
        for k in kinds:
            CONVERTERS[k] = fn
        return fn
    return register


def _host(p: Planner, thunk: nt.Thunk, stream: int) -> gt.GpuThunk:
    operands, outputs = nt.io_slices(thunk)
    instr = p.instr(thunk.name)
    if thunk.kind not in ("kernel", "gemm", "convolution", "sort"):
        p.notes.append(f"%{thunk.name} ({instr.opcode.value}) runs on the host")
    return gt.HostCompute(thunk.name, instr.opcode.value, operands, outputs)


@converts("kernel", "gemm", "convolution", "sort")
def _kernel(p: Planner, thunk: nt.Thunk, stream: int) -> gt.GpuThunk:
    instr = p.instr(thunk.name)
    operands, outputs = nt.io_slices(thunk)
    try:
        parts = plan_parts(plan_context(instr, p.target, operands, outputs))
    except UnsupportedError as e:
        p.notes.append(f"%{instr.name} runs on the host: {e}")
        return _host(p, thunk, stream)
    made = p.launches(thunk.name, instr, parts, operands + outputs, stream)
    if made is None:
        return _host(p, thunk, stream)
    if isinstance(made, gt.Gemm):
        made = replace(made, blas=blas_call(instr, operands, outputs))
    return made


@converts("copy")
def _copy(p: Planner, thunk: nt.Copy, stream: int) -> gt.GpuThunk:
    return gt.Copy(thunk.name, thunk.source, thunk.destination)


@converts("memset")
def _memset(p: Planner, thunk: nt.Memset, stream: int) -> gt.GpuThunk:
    return gt.Memset(thunk.name, thunk.destination, thunk.byte)


@converts("while")
def _while(p: Planner, thunk: nt.While, stream: int) -> gt.GpuThunk:
    return gt.While(thunk.name, p.sequence(thunk.condition, stream), p.sequence(thunk.body, stream),
                    thunk.predicate, thunk.trip_count)


@converts("conditional")
def _conditional(p: Planner, thunk: nt.Conditional, stream: int) -> gt.GpuThunk:
    return gt.Conditional(thunk.name, thunk.selector,
                          tuple(p.sequence(b, stream) for b in thunk.branches),
                          thunk.selector_is_pred)


@converts("sequential")
def _sequential(p: Planner, thunk: nt.Sequential, stream: int) -> gt.GpuThunk:
    return gt.Sequential(thunk.name, p.sequence(thunk.thunks, stream))


def build_gpu_program(module: Module, program: nt.ThunkProgram, target: CudaTarget) -> GpuBuild:
    """Plan and emit every kernel of `program` (the target-neutral thunks of `module`)."""
    streams = program.streams
    num_streams = streams.num_streams if streams is not None else 1
    planner = Planner(module, target, num_streams, len(program.allocations))
    main = tuple(planner.convert(t, streams.streams[i] if streams else 0)
                 for i, t in enumerate(program.sequence))
    allocations = list(program.allocations)
    if planner.scratch_bytes:
        for _ in range(num_streams):
            allocations.append(Allocation(len(allocations), planner.scratch_bytes, "scratch"))
    uploads = tuple(gt.Upload(s, number=n, index=tuple(i)) for n, i, s in program.parameters)
    uploads += tuple(gt.Upload(s, constant=name) for name, s in program.constants)
    downloads = tuple(gt.Download(tuple(i), s) for i, s in program.outputs)
    digests = tuple(sorted((name, ir_digest(m)) for name, m in planner.modules.items()))
    gpu = gt.GpuProgram(program.module, tuple(allocations), uploads, main, downloads,
                        tuple(planner.recipes), streams, tuple(planner.notes), digests)
    return GpuBuild(gpu, planner.modules)


__all__ = ["GpuBuild", "Planner", "build_gpu_program", "emit_recipe", "ir_digest"]
