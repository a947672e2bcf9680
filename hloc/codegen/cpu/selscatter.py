"""select-and-scatter on the CPU: fill with the init value, then scatter every window's pick.

XLA semantics: the output (operand-shaped) starts as the init value. For every window of the
operand, in row-major order of the source, the selected element is found — taps in row-major
order, padding and base-dilation holes skipped, a tap replacing the current choice when
select(current, tap) is false, so among equals the first wins — and source[s] is combined
into the output there with the scatter computation.

Windows may overlap, so one output element can receive several sources, in window order.
Work units therefore cover only *free* dimensions: those where the window is one element
with unit stride and no padding or dilation (e.g. the batch and channel dimensions of a
pooling). There window s reads and writes operand position s alone, so units over the free
dimensions own disjoint output slabs; inside a unit everything runs serially.

`WindowSelector` (elemental/windows.py, the pick of one window) is shared with CUDA.
"""

from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, Shape
from ..elemental.compose import emit_scalar_computation
from ..elemental.indexing import delinearize
from ..elemental.memory import load_element, store_element
from ..elemental.windows import WindowSelector
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec


def free_dimensions(instr: Instruction) -> list[int]:
    """Dimensions where window s covers operand position s only."""
    return [d for d, wd in enumerate(instr.attrs.window.dims)
            if wd.size == 1 and wd.stride == 1 and wd.padding_low == 0 and wd.padding_high == 0
            and wd.base_dilation == 1]


@special_segment(Opcode.SELECT_AND_SCATTER)
def plan_select_and_scatter(spec: KernelSpec, item: RootItem):
    if spec.aliases:
        # Later windows read operand/source elements an earlier scatter may have written.
        raise UnsupportedError(f"select-and-scatter %{item.instr.name} writes over an operand")
    return SelectScatterSegment(spec, item)


class SelectScatterSegment(Segment):
    """One unit per position of the free dimensions: init its slab, then its windows."""

    kind = "select-and-scatter"

    def __init__(self, spec: KernelSpec, item: RootItem):
        self.spec, self.item = spec, item
        instr = item.instr
        self.shape: Shape = spec.output_shapes[item.outputs[0]]
        self.source: Shape = instr.operands[1].shape
        self.free = free_dimensions(instr)
        self.serial = [d for d in range(self.shape.rank) if d not in self.free]
        empty = self.shape.num_elements == 0
        self.extent = 0 if empty else math.prod(self.shape.dims[d] for d in self.free)

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx = kb.ctx
        instr = self.item.instr
        operand_gen, source_gen, init_gen = (kb.gen(o) for o in instr.operands)
        out = kb.outputs[self.item.outputs[0]]
        selector = WindowSelector(ctx, instr, operand_gen)
        with ctx.loop(lo, hi, "unit") as unit:
            index: list[ir.Value] = [ctx.i64(0)] * self.shape.rank
            free_dims = [self.shape.dims[d] for d in self.free]
            fixed = delinearize(ctx.builder, unit, free_dims, fold_unit_dims=False)
            for d, v in zip(self.free, fixed, strict=True):
                index[d] = v
            self._fill(ctx, out, list(index), init_gen([]))
            self._scatter(kb, out, list(index), selector, source_gen)

    def _fill(self, ctx, out, index, init: ir.Value) -> None:
        with contextlib.ExitStack() as stack:
            for d in self.serial:
                index[d] = stack.enter_context(ctx.loop(0, self.shape.dims[d], "fill"))
            store_element(ctx, self.shape, out, index, init)

    def _scatter(self, kb: KernelBuild, out, s, selector: WindowSelector, source_gen) -> None:
        ctx = kb.ctx
        b = ctx.builder
        with contextlib.ExitStack() as stack:
            for d in self.serial:
                s[d] = stack.enter_context(ctx.loop(0, self.source.dims[d], "win"))
            found, pos = selector.selected(list(s))
            stack.enter_context(b.if_then(found))
            cur = load_element(ctx, self.shape, out, pos)
            new = emit_scalar_computation(ctx, self.item.instr.called[1], [cur, source_gen(s)])
            store_element(ctx, self.shape, out, pos, new[0])
