"""Reduce-window roots: scans, and long windows swept a row at a time.

- A window that grows by one element an output is a scan (codegen/cpu/scan.py).
- A window of more than SHORT_WINDOW taps that leaves the contiguous dimension alone (size
  1 there: XLA's tree reductions over leading dimensions, a complex or bf16 sum over batch
  and time in windows of 4 x 32) is swept like a column reduction: a work unit is a block
  of contiguous output positions, each with its accumulator on the stack; the taps loop
  outside, and inside them one vectorizable loop combines a tap into every accumulator of
  the block. Element by element, the taps were the innermost loop, a chain LLVM cannot
  vectorize (no reassociation: XLA sums a window tap after tap). The taps come in the same
  order, so the sums are the same. A tap that reads padding is skipped for the whole block
  (its position does not depend on the contiguous dimension).
- Anything else is a plain loop over the outputs (elemental reduce_window).
"""

from __future__ import annotations

import contextlib
import itertools
import math

from llvmlite import ir

from ...ir import Opcode
from ..elemental.memory import major_to_minor, store_element
from ..elemental.reduction import SHORT_WINDOW, Reducer, tap_periods, tap_positions
from ..elemental.types import elem_type
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec
from .loops import ROW_VECTOR_MIN
from .row_blocks import RowBlocks
from .scan import ScanSegment, as_scan

# Contiguous positions per unit (as column reductions: accumulators in L1).
BLOCK = 1024


@special_segment(Opcode.REDUCE_WINDOW)
def plan_reduce_window(spec: KernelSpec, item: RootItem):
    instr = item.instr
    scan = as_scan(instr)
    if scan is not None:
        return ScanSegment(spec, item, scan)
    return RowsSegment(spec, item) if swept_by_rows(instr) else None


def swept_by_rows(instr) -> bool:
    """A long window that leaves the output's contiguous dimension alone, over a row wide
    enough to vectorize."""
    shape = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    if shape.rank == 0:
        return False
    window = instr.attrs.window.dims
    minor = major_to_minor(shape)[-1]
    return (window[minor].trivial and shape.dims[minor] >= ROW_VECTOR_MIN
            and math.prod(wd.size for wd in window) > SHORT_WINDOW)


class RowsSegment(Segment):
    kind = "window-rows"

    def __init__(self, spec: KernelSpec, item: RootItem):
        self.spec, self.item = spec, item
        self.n_inputs = len(item.instr.operands) // 2
        self.out_shape = spec.output_shapes[item.outputs[0]]
        order = major_to_minor(self.out_shape)
        self.col = order[-1]
        self.rows = RowBlocks.of(self.out_shape, order[:-1], self.col, BLOCK)
        self.extent = self.rows.extent

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx, b = kb.ctx, kb.ctx.builder
        instr = self.item.instr
        window = instr.attrs.window.dims
        in_dims = instr.operands[0].shape.dims
        ets = [elem_type(o.shape.element_type, complex_ok=True)
               for o in instr.operands[:self.n_inputs]]
        types = [et.value_type for et in ets]
        reducer = Reducer(ctx, instr.called[0], ets, reassoc=False)
        inputs = [kb.gen(o) for o in instr.operands[:self.n_inputs]]
        inits = [kb.gen(o) for o in instr.operands[self.n_inputs:]]
        slots = [ctx.alloca(t, self.rows.block) for t in types]
        periods = tap_periods(ctx, instr)
        # Padding and base dilation are tested; windows without either stay inside.
        checked = [wd.padding_low > 0 or wd.padding_high > 0 or wd.base_dilation > 1
                   for wd in window]
        with ctx.loop(lo, hi, "unit") as unit:
            index, start, stop = self.rows.unit(ctx, unit)

            @contextlib.contextmanager
            def block(name):
                """The block's positions: (the column, each accumulator's slot)."""
                with ctx.loop(start, stop, name) as c:
                    local = b.sub(c, start)
                    yield c, [b.gep(s, [local], inbounds=True, source_etype=t)
                              for s, t in zip(slots, types, strict=True)]

            first = reducer.start([g([]) for g in inits])
            with block("init") as (_, ptrs):
                for p, v in zip(ptrs, first, strict=True):
                    b.store(v, p)

            def tap(taps):
                pos, valid = tap_positions(ctx, index, taps, window, in_dims, checked)
                with b.if_then(valid) if valid is not None else contextlib.nullcontext():
                    with block("col") as (c, ptrs):
                        at = list(pos)
                        at[self.col] = c
                        accs = [b.load(p, typ=t) for p, t in zip(ptrs, types, strict=True)]
                        values = [g(at) for g in inputs]
                        for p, v in zip(ptrs, reducer.combine(accs, values), strict=True):
                            b.store(v, p)

            with contextlib.ExitStack() as stack:
                # A dimension with a residue period steps a period at a time, a copy of the
                # tap per class, in the taps' order (as the elemental form).
                ivs = [stack.enter_context(ctx.loop(0, wd.size // p, "w", vectorize=False))
                       for wd, p in zip(window, periods, strict=True)]
                copies = [[iv] if p == 1 else
                          [b.add(b.mul(iv, ctx.i64(p)), ctx.i64(r)) for r in range(p)]
                          for iv, p in zip(ivs, periods, strict=True)]
                for taps in itertools.product(*copies):
                    tap(list(taps))

            with block("out") as (c, ptrs):
                at = list(index)
                at[self.col] = c
                accs = [b.load(p, typ=t) for p, t in zip(ptrs, types, strict=True)]
                for k, v in zip(self.item.outputs, reducer.finish(accs), strict=True):
                    store_element(ctx, self.spec.output_shapes[k], kb.outputs[k], at, v)
