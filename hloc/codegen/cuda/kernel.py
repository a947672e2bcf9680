"""One GPU kernel: its recipe (what to emit), launch dimensions, and the emission context.

Kernel ABI: `ptx_kernel void NAME(ptr a0, ptr a1, ...)` — the leaves of the HLO
instruction's operands (depth-first, in operand order), then the leaves of its result, then
(when the recipe asks for it) one scratch buffer. Buffers are dense arrays in their shape's
layout; pred and sub-byte integers take a byte per element, narrow floats are stored as their
bit patterns (the elemental emitter's storage forms).

A `KernelRecipe` (hloc.thunks.gpu) is plain data (JSON in the bundle): the variant, the HLO instruction, which
root items of it the kernel writes, and variant parameters. The same recipe always emits the
same IR, which is how `--device cuda-emulated` rebuilds exactly the bundled kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Attrs, Computation, Instruction, Opcode, Shape
from ...registry import Registry
from ...thunks.gpu import KernelRecipe  # plain data of the GPU program, read by the runtime
from ...util.record import dataclass
from ..elemental import computation_generators
from ..elemental.context import EmitContext
from ..elemental.memory import load_element
from ..elemental.types import I64
from ..roots import RootItem, root_items  # noqa: F401  (re-exported for the kernel variants)
from .nvvm import Nvvm, kernel_function


@dataclass(frozen=True)
class LaunchDims:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def to_json(self) -> dict:
        return {"grid": list(self.grid), "block": list(self.block)}


def dims(grid, block) -> LaunchDims:
    pad = lambda t: tuple(int(v) for v in (tuple(t) + (1, 1, 1))[:3])  # noqa: E731
    return LaunchDims(pad(grid), pad(block))


def kernel_computation(instr: Instruction) -> Computation:
    """A fusion's computation, or a single instruction wrapped with parameters for operands."""
    if instr.opcode == Opcode.FUSION:
        return instr.fused_computation()
    comp = Computation(f"{instr.name}.kernel", is_fusion=True)
    params = [comp.add(Instruction(Opcode.PARAMETER, op.shape, name=f"p{i}",
                                   attrs=Attrs(parameter_number=i)))
              for i, op in enumerate(instr.operands)]
    clone = Instruction(instr.opcode, instr.shape, params, name=instr.name, called=instr.called,
                        attrs=instr.attrs)
    comp.add(clone)
    comp.root = clone
    return comp


def leaf_shapes(shape: Shape) -> list[Shape]:
    return [s for _, s in shape.leaves() if s.is_array]


@dataclass
class KernelBuild:
    """Everything a variant emitter needs while emitting one kernel."""

    recipe: KernelRecipe
    instr: Instruction
    fn: ir.Function
    ctx: EmitContext
    nvvm: Nvvm
    comp: Computation
    operands: list[ir.Value]
    outputs: list[ir.Value]
    output_shapes: list[Shape]
    scratch: ir.Value | None
    gens: dict[int, Callable] = field(default_factory=dict)

    @property
    def b(self) -> ir.IRBuilder:
        return self.ctx.builder

    def gen(self, instr: Instruction) -> Callable:
        return self.gens[id(instr)]

    def items(self) -> list[RootItem]:
        every = root_items(self.comp)
        if any(not 0 <= i < len(every) for i in self.recipe.items):
            raise ValueError(f"root items {list(self.recipe.items)} out of range: "
                             f"{self.comp.name} has {len(every)}")
        return [every[i] for i in self.recipe.items]

    def i64(self, v: int) -> ir.Value:
        return ir.Constant(I64, int(v))

    def tid(self, axis: str = "x") -> ir.Value:
        return self.nvvm.sreg64("tid", axis)

    def ctaid(self, axis: str = "x") -> ir.Value:
        return self.nvvm.sreg64("ctaid", axis)

    def ntid(self, axis: str = "x") -> ir.Value:
        return self.nvvm.sreg64("ntid", axis)


Emitter = Callable[[KernelBuild], None]
# Kernel variant name -> emitter, registered with `@variant("name")` by the modules listed here.
VARIANTS: Registry[str, Emitter] = Registry("GPU kernel variant", modules=tuple(
    f"hloc.codegen.cuda.{name}" for name in (
        "conv_core", "conv_split", "dus", "fft", "gemm", "loop", "reduce_col", "reduce_row",
        "scatter", "sort", "topk", "transpose")))
variant = VARIANTS.register


def _operand_generators(ctx, instr: Instruction, comp: Computation, pointers: list[ir.Value]):
    gens = []
    for i, op in enumerate(instr.operands):
        if not op.shape.is_array:
            raise UnsupportedError(f"%{instr.name}: tuple-shaped operand {i} of a GPU kernel is "
                                   "not supported")
        gens.append(lambda index, s=op.shape, p=pointers[i]: load_element(ctx, s, p, index))
    return gens


def emit_kernel(module: ir.Module, recipe: KernelRecipe, instr: Instruction, target) -> None:
    """Emit kernel `recipe.name` for `instr` into `module`."""
    emitter = VARIANTS.get(recipe.variant)
    if emitter is None:
        raise UnsupportedError(f"unknown GPU kernel variant '{recipe.variant}'")
    n_ops = sum(len(leaf_shapes(o.shape)) for o in instr.operands)
    out_shapes = leaf_shapes(instr.shape)
    n_args = n_ops + len(out_shapes) + (1 if recipe.scratch_bytes else 0)
    fn = kernel_function(module, recipe.name, n_args, recipe.block_threads)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = EmitContext(module, builder, target, prefix=recipe.name, native_half=False)
    nvvm = Nvvm(module, builder, recipe.name)
    comp = kernel_computation(instr)
    args = list(fn.args)
    kb = KernelBuild(recipe, instr, fn, ctx, nvvm, comp, args[:n_ops],
                     args[n_ops:n_ops + len(out_shapes)], out_shapes,
                     args[-1] if recipe.scratch_bytes else None)
    kb.gens = computation_generators(ctx, comp, _operand_generators(ctx, instr, comp,
                                                                    kb.operands))
    emitter(kb)
    if not builder.block.is_terminated:
        builder.ret_void()
    nvvm.finish()
