"""Loop nests in memory order, and the plain loop segment built on them.

A `Nest` walks every index of a shape. Its work units are (row, block) pairs: a row is one
position of every dimension but the contiguous (innermost in memory) one, and long rows are
cut into blocks of at most BLOCK elements, so even a 1-D array splits across threads. The
innermost loop walks the contiguous dimension with unit stride, which is what LLVM's loop
vectorizer wants.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

from llvmlite import ir

from ...ir import Instruction, Opcode, Shape
from ..elemental.compose import flatten
from ..elemental.indexing import delinearize
from ..elemental.memory import major_to_minor, store_element
from ..elemental.regions import regions, split_points
from .kernel import KernelBuild, RootItem, Segment
from .kernel_spec import KernelSpec

BLOCK = 8192
# Rows at least this long keep LLVM's loop vectorizer off the unit loop. LLVM unrolls a short
# row's loop completely and then vectorizes across units, whose elements lie a row apart:
# every load a gather and every store a scatter (an HMM step's 8 x 16 x 16 add: 3.6 us). The
# unrolled row is contiguous, so the SLP vectorizer makes it full-width loads and stores.
ROW_VECTOR_MIN = 8
# Copies of a loop body, at most, when a nest is split into regions (elemental.regions).
MAX_REGIONS = 16


class Nest:
    """Units of (row, block) over a shape walked in memory order."""

    def __init__(self, shape: Shape, block: int = BLOCK):
        self.shape = shape
        self.order = major_to_minor(shape)
        if shape.rank == 0:
            self.inner, self.block, self.blocks, self.rows = 1, 1, 1, 1
        else:
            n_inner = shape.dims[self.order[-1]]
            self.inner = n_inner
            self.block = max(1, min(n_inner, block))
            self.blocks = -(-n_inner // self.block)
            self.rows = math.prod(shape.dims[d] for d in self.order[:-1])
        self.extent = self.rows * self.blocks

    def unit_bounds(self, ctx, unit: ir.Value):
        """(outer index values in `order[:-1]`, start, stop of the contiguous dimension)."""
        b = ctx.builder
        row = b.udiv(unit, ctx.i64(self.blocks)) if self.blocks > 1 else unit
        start, stop = ctx.i64(0), ctx.i64(self.inner)
        if self.blocks > 1:
            blk = b.urem(unit, ctx.i64(self.blocks))
            start = b.mul(blk, ctx.i64(self.block), flags=["nsw"])
            stop = ctx.call("llvm.smin.i64", [b.add(start, ctx.i64(self.block)), stop])
        outer_dims = [self.shape.dims[d] for d in self.order[:-1]]
        outer = delinearize(b, row, outer_dims, fold_unit_dims=False)
        return outer, start, stop

    def emit(self, ctx, lo: ir.Value, hi: ir.Value, body: Callable[[list[ir.Value]], None],
             points: list[set[int]] | None = None):
        """Call body(index) for every index of units [lo, hi). `points` (per dimension, from
        elemental.regions.split_points) splits the nest into regions, each emitted with its
        index ranges assumed; at most MAX_REGIONS copies of the body."""
        if self.shape.rank == 0:
            body([])
            return
        cuts = self._regions(points)
        with ctx.loop(lo, hi, "unit", vectorize=self.inner < ROW_VECTOR_MIN) as unit:
            outer, start, stop = self.unit_bounds(ctx, unit)

            def rows(index: list[ir.Value]) -> None:
                inner = self.order[-1]
                for a, z in cuts[inner]:
                    first, last = start, stop
                    if (a, z) != (0, self.inner):
                        first = ctx.call("llvm.smax.i64", [start, ctx.i64(a)])
                        last = ctx.call("llvm.smin.i64", [stop, ctx.i64(z)])
                    with ctx.loop(first, last, "j") as j, self._assume(ctx, j, inner, a, z):
                        index[inner] = j
                        body(list(index))

            index: list[ir.Value] = [ctx.i64(0)] * self.shape.rank
            for d, v in zip(self.order[:-1], outer, strict=True):
                index[d] = v
            self._outer_regions(ctx, index, cuts, list(self.order[:-1]), rows)

    def _regions(self, points: list[set[int]] | None) -> dict[int, list[tuple[int, int]]]:
        """Per dimension, the [lo, hi) regions to emit apart: the contiguous dimension's
        first (its loops vectorize), then outer ones, innermost first, while the product of
        the counts stays within MAX_REGIONS."""
        dims = self.shape.dims
        cuts = {d: [(0, dims[d])] for d in range(self.shape.rank)}
        total = 1
        for d in reversed(self.order) if points else ():
            split = regions(points[d], dims[d])
            if total * len(split) <= MAX_REGIONS:
                cuts[d] = split
                total *= len(split)
        return cuts

    def _outer_regions(self, ctx, index, cuts, dims: list[int], emit) -> None:
        """emit(index) once per combination of the outer dimensions' regions, each behind the
        branches that select it and with its ranges assumed."""
        if not dims:
            emit(index)
            return
        d, rest = dims[-1], dims[:-1]
        (a, z), later = cuts[d][0], cuts[d][1:]
        if not later:
            with self._assume(ctx, index[d], d, a, z):
                self._outer_regions(ctx, index, cuts, rest, emit)
            return
        b = ctx.builder
        with b.if_else(b.icmp_signed("<", index[d], ctx.i64(z))) as (then, otherwise):
            with then, ctx.assume(index[d], a, z):
                self._outer_regions(ctx, index, cuts, rest, emit)
            with otherwise:
                self._outer_regions(ctx, index, {**cuts, d: later}, [*rest, d], emit)

    def _assume(self, ctx, value, d: int, a: int, z: int):
        """ctx.assume for a region, nothing for a dimension that is not split (its code stays
        as it was before regions existed)."""
        if (a, z) == (0, self.shape.dims[d]):
            return contextlib.nullcontext()
        return ctx.assume(value, a, z)


def element_work(instr: Instruction) -> int:
    """Rough operations per output element: the largest inner loop below `instr`."""
    work, seen, stack = 1, set(), [instr]
    while stack:
        i = stack.pop()
        if id(i) in seen:
            continue
        seen.add(id(i))
        work = max(work, _inner_trip_count(i))
        stack.extend(i.operands)
    return work


def _inner_trip_count(i: Instruction) -> int:
    if i.opcode == Opcode.REDUCE:
        return math.prod(i.operands[0].shape.dims[d] for d in i.dimensions)
    if i.opcode == Opcode.REDUCE_WINDOW:
        return math.prod(w.size for w in i.attrs.window.dims)
    if i.opcode == Opcode.DOT:
        from .dot import buffered  # (dot.py builds on this module)

        if buffered(i):
            return 1  # computed ahead, whole (its work counts once per kernel: thunk_kernels)
        lhs = i.operands[0].shape
        return math.prod(lhs.dims[d] for d in i.attrs.dot_dnums.lhs_contracting_dimensions)
    if i.opcode == Opcode.CONVOLUTION:
        # Per output element: every kernel tap over the input features of its group.
        kernel, dn = i.operands[1].shape, i.attrs.conv_dnums
        return kernel.dims[dn.kernel_input_feature_dimension] * \
            math.prod(kernel.dims[d] for d in dn.kernel_spatial_dimensions)
    if i.opcode == Opcode.SELECT_AND_SCATTER:
        return math.prod(w.size for w in i.attrs.window.dims)
    return 1


class LoopSegment(Segment):
    """Writes one or more same-shaped outputs, each element from its generator."""

    kind = "loop"

    def __init__(self, item: RootItem, spec: KernelSpec):
        self.items = [item]
        self.spec = spec
        # Elements that loop inside (reductions, windows, dots) get smaller blocks so a unit
        # stays around BLOCK operations and parallel splits stay balanced.
        block = max(1, BLOCK // element_work(item.instr))
        self.nest = Nest(spec.output_shapes[item.outputs[0]], block)
        self.extent = self.nest.extent

    def add(self, item: RootItem, spec: KernelSpec) -> None:
        self.items.append(item)

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        def body(index):
            for item in self.items:
                values = flatten(kb.gen(item.instr)(index))
                for k, v in zip(item.outputs, values, strict=True):
                    store_element(kb.ctx, self.spec.output_shapes[k], kb.outputs[k], index, v)

        points = split_points([item.instr for item in self.items], self.nest.shape.rank)
        self.nest.emit(kb.ctx, lo, hi, body, points)
