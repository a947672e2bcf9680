"""Planning kernels for one HLO instruction: which variants, which root items, which launch.

An item planner (registered per root opcode with `@plans(Opcode.X)`) looks at one root item of
a kernel's computation and returns the kernel parts it needs, or None to leave the item to
the plain loop kernel. Loop items of the same shape share one loop kernel. Parts run in
order: loops and reductions first, in-place updates last (they may overwrite an operand the
others read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from ...buffers.assignment import Slice
from ...ir import Computation, Instruction, Opcode, Shape
from ...registry import Registry
from ...util.record import dataclass
from ..elemental.registry import involves_complex
from .kernel import LaunchDims, RootItem, kernel_computation, leaf_shapes, root_items
from .target import CudaTarget


@dataclass(frozen=True)
class Part:
    """One kernel launch planned for an instruction."""

    variant: str
    items: tuple[int, ...]
    launch: LaunchDims
    params: tuple[tuple[str, int], ...] = ()
    shared_bytes: int = 0
    scratch_bytes: int = 0
    block_threads: int = 0  # launch bound; 0: the launch's block size
    gemm: tuple[int, int, int, int] | None = None  # (batch, m, n, k) for Gemm thunks
    late: bool = False  # runs after the other parts (in-place updates)


@dataclass
class PlanContext:
    """What item planners may look at."""

    instr: Instruction
    comp: Computation
    items: list[RootItem]
    target: CudaTarget
    operand_slices: tuple[Slice, ...] = ()
    output_slices: tuple[Slice, ...] = ()
    operand_shapes: list[Shape] = field(default_factory=list)
    output_shapes: list[Shape] = field(default_factory=list)

    def aliased(self, output: int, operand: int) -> bool:
        """Whether output leaf `output` is the very buffer of operand leaf `operand`."""
        if not self.output_slices or not self.operand_slices:
            return False
        return self.output_slices[output] == self.operand_slices[operand]

    def overlaps_operands(self, output: int) -> bool:
        if not self.output_slices:
            return False
        o = self.output_slices[output]
        return any(s.allocation == o.allocation and s.offset < o.offset + o.size
                   and o.offset < s.offset + s.size for s in self.operand_slices)


ItemPlanner = Callable[[PlanContext, int], list[Part] | None]
# Registered with `@plans(Opcode.X)` by the modules listed here.
ITEM_PLANNERS: Registry[Opcode, ItemPlanner] = Registry("GPU item planner", modules=tuple(
    f"hloc.codegen.cuda.{name}" for name in (
        "conv_split", "dus", "gemm", "reduce_row", "scatter", "sort", "topk", "transpose")))
# Planners whose kernels handle complex elements; other special kernels (gemm, transpose,
# sort, ...) are written for real types, so a complex item goes to the loop kernel instead
# (its elemental dot, transpose, ... handle complex values).
COMPLEX_PLANNERS = frozenset({Opcode.REDUCE})


plans = ITEM_PLANNERS.register


def plan_context(instr: Instruction, target, operand_slices=(), output_slices=()) -> PlanContext:
    comp = kernel_computation(instr)
    return PlanContext(instr, comp, root_items(comp), target, tuple(operand_slices),
                       tuple(output_slices),
                       [s for o in instr.operands for s in leaf_shapes(o.shape)],
                       leaf_shapes(instr.shape))


def special_parts(pc: PlanContext, k: int) -> list[Part] | None:
    """The parts item `k`'s own planner (by its core's opcode) gives, or None for the plain
    loop kernel. An empty list: another item's kernel computes it."""
    from .epilogue import find_core

    item = pc.items[k]
    core = find_core(item.instr) or item.instr
    planner = ITEM_PLANNERS.get(core.opcode)
    if planner is None or (core.opcode not in COMPLEX_PLANNERS and (
            involves_complex(core) or involves_complex(item.instr))):
        return None
    return planner(pc, k)


def plan_parts(pc: PlanContext) -> list[Part]:
    """Every kernel part an instruction needs (empty when it writes nothing)."""
    from .loop import plan_loop

    parts: list[Part] = []
    rest: list[int] = []
    for k, item in enumerate(pc.items):
        shapes = [pc.output_shapes[i] for i in item.outputs]
        if not shapes or all(s.num_elements == 0 for s in shapes):
            continue
        special = special_parts(pc, k)
        if special is not None:
            parts.extend(special)
        else:
            rest.append(k)
    # A special part may compute other items too (an in-place update the value it copies).
    taken = {k for p in parts for k in p.items}
    groups: dict[tuple, list[int]] = {}
    for k in rest:
        if k in taken:
            continue
        shapes = [pc.output_shapes[i] for i in pc.items[k].outputs]
        key = tuple((s.dims, s.layout) for s in shapes[:1])
        groups.setdefault(key, []).append(k)
    loops = [plan_loop(pc, tuple(ks)) for ks in groups.values()]
    ordered = [p for p in parts if not p.late] + loops + [p for p in parts if p.late]
    return ordered
