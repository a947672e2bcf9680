"""GPU program construction: the target-neutral thunk program → GPU thunks (hloc.thunks.gpu)
and kernel IR.

Each kernel is emitted into its own LLVM module as soon as it is planned; an instruction whose
kernels cannot be emitted (an op without a GPU lowering) becomes a HostCompute thunk instead,
with a note. Per-kernel modules keep the IR of one kernel independent of every other, which
the emulator relies on to rebuild and check kernels one by one. A Gemm thunk of a plain dot
also records its cuBLAS form (gemm.blas_call), which the runtime may use instead of the kernel;
a kernel thunk of a convolution becomes a ConvLaunch, and a plain one records its cuDNN form
(conv_dnn.conv_call) the same way; a fusion of a convolution with an elementwise epilogue
runs as the convolution into scratch (a ConvLaunch with its cuDNN form) then the epilogue
(conv_core).
Copies, memsets and control flow are the same thunk classes in both programs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import field, fields, replace
from typing import Any

from llvmlite import ir

from ...buffers.assignment import Allocation, Slice
from ...errors import UnsupportedError
from ...ir import Instruction, Module
from ...registry import Registry
from ...thunks import thunks as nt
from ...thunks.base import Thunk, ThunkKind, map_nested
from ...thunks.gpu import (
    ConvLaunch,
    Download,
    GemmLaunch,
    GpuProgram,
    HostCompute,
    KernelRecipe,
    Launch,
    Upload,
)
from ...thunks.thunks import Sequential
from ...util.log import get_logger
from ...util.record import dataclass
from .conv_core import described
from .conv_dnn import conv_call, holds_convolution
from .epilogue import find_core
from .gemm import blas_call
from .kernel import emit_kernel
from .parts import Part, plan_context, plan_parts
from .target import DATA_LAYOUT, TRIPLE, CudaTarget

log = get_logger("hloc.codegen.cuda")


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

    program: GpuProgram
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

    def sequence(self, thunks, stream: int) -> tuple[Thunk, ...]:
        return tuple(self.convert(t, stream) for t in thunks)

    def convert(self, thunk: nt.Thunk, stream: int) -> Thunk:
        return CONVERTERS.lookup(thunk.kind)(self, thunk, stream)

    def symbol(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name)
        base = base if base[:1].isalpha() or base[:1] == "_" else f"k_{base}"
        sym, n = base, 1
        while sym in self.names:
            sym, n = f"{base}_{n}", n + 1
        self.names.add(sym)
        return sym

    def launches(self, thunk_name: str, instr: Instruction, parts: list[Part], args,
                 stream: int) -> Thunk | None:
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
        return thunks[0] if len(thunks) == 1 else Sequential(thunk_name, tuple(thunks))

    def _launch(self, thunk_name, recipe, module, part, args, stream) -> Launch:
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
            return GemmLaunch(thunk_name, **common, batch=batch, m=m, n=n, k=k)
        return Launch(thunk_name, **common)


# converter(planner, thunk, stream): `thunk` is of the class its kind (the registry key) names,
# which a converter may declare (nt.Fft, ...); the registry cannot tie key to class: Any.
Converter = Callable[[Planner, Any, int], Thunk]
# Target-neutral thunk kind -> its GPU form. Copies and memsets are the same thunks on the GPU,
# and control flow keeps its shape with its nested sequences converted.
CONVERTERS: Registry[ThunkKind, Converter] = Registry("GPU thunk converter",
                                                      modules=("hloc.codegen.cuda.fft",))
converts = CONVERTERS.register
_KERNEL_KINDS = (ThunkKind.KERNEL, ThunkKind.GEMM, ThunkKind.CONVOLUTION, ThunkKind.SORT)


@converts(ThunkKind.CUSTOM_CALL)
def _host(p: Planner, thunk: nt.Thunk, stream: int) -> Thunk:
    """The instruction on the host (the kinds with kernels come here when planning fails)."""
    instr = p.instr(thunk.name)
    if thunk.kind not in _KERNEL_KINDS:
        p.notes.append(f"%{thunk.name} ({instr.opcode.value}) runs on the host")
    return HostCompute(thunk.name, instr.opcode.value, thunk.reads(), thunk.writes())


@converts(*_KERNEL_KINDS)
def _kernel(p: Planner, thunk: nt.Thunk, stream: int) -> Thunk:
    instr = p.instr(thunk.name)
    operands, outputs = thunk.reads(), thunk.writes()
    try:
        pc = plan_context(instr, p.target, operands, outputs)
        parts = plan_parts(pc)
    except UnsupportedError as e:
        p.notes.append(f"%{instr.name} runs on the host: {e}")
        return _host(p, thunk, stream)
    made = p.launches(thunk.name, instr, parts, operands + outputs, stream)
    if made is None:
        return _host(p, thunk, stream)
    if isinstance(made, GemmLaunch):
        made = replace(made, blas=blas_call(instr, operands, outputs))
    elif ("core_only", 1) in parts[0].params and isinstance(made, Sequential) and \
            isinstance(first := made.thunks[0], GemmLaunch):
        # A dot whose epilogue runs as a second kernel (gemm.splits_epilogue): its GEMM part
        # writes the output, so cuBLAS can run it.
        core = find_core(pc.items[parts[0].items[0]].instr)
        blas = blas_call(instr, operands, outputs, dot=core)
        made = replace(made, thunks=(replace(first, blas=blas),) + made.thunks[1:])
    elif (split := described(made, instr, operands)) is not None:
        made = split
    elif type(made) is Launch and holds_convolution(instr):
        made = ConvLaunch(**{f.name: getattr(made, f.name) for f in fields(made)},
                          dnn=conv_call(instr, operands, outputs))
    return made


@converts(ThunkKind.COPY, ThunkKind.MEMSET, ThunkKind.COLLECTIVE, ThunkKind.DEVICE_ID)
def _same(p: Planner, thunk: nt.Thunk, stream: int) -> Thunk:
    """Copies, memsets, collectives (host-staged by the runtime) and device ids."""
    return thunk


@converts(ThunkKind.WHILE, ThunkKind.CONDITIONAL, ThunkKind.SEQUENTIAL)
def _control_flow(p: Planner, thunk: nt.Thunk, stream: int) -> Thunk:
    return map_nested(thunk, lambda sequence: p.sequence(sequence, stream))


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
    uploads = tuple(Upload(s, number=n, index=tuple(i)) for n, i, s in program.parameters)
    uploads += tuple(Upload(s, constant=name) for name, s in program.constants)
    downloads = tuple(Download(tuple(i), s) for i, s in program.outputs)
    digests = tuple(sorted((name, ir_digest(m)) for name, m in planner.modules.items()))
    gpu = GpuProgram(program.module, tuple(allocations), uploads, main, downloads,
                        tuple(planner.recipes), streams, tuple(planner.notes), digests)
    return GpuBuild(gpu, planner.modules)


__all__ = ["GpuBuild", "Planner", "build_gpu_program", "emit_recipe", "ir_digest"]
