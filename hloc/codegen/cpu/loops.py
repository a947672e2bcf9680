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
from ..elemental.regions import Splits, analyze, regions
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
# Copies of a loop body, at most, when the contiguous dimension's regions also run copies per
# residue class (two per class: the whole periods' and the edges').
MAX_COPIES = 64
# A region is emitted by residue classes when it is at least this many periods long; shorter
# regions next to each other become one, emitted by the plain loop.
RESIDUE_MIN_PERIODS = 4


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
             splits: Splits | None = None):
        """Call body(index) for every index of units [lo, hi). `splits` (elemental.regions)
        splits the nest into regions, each emitted with its index ranges assumed, and where
        interior padding interleaves, into residue classes, each emitted with its residue
        assumed; at most MAX_REGIONS (MAX_COPIES with residues) copies of the body."""
        if self.shape.rank == 0:
            body([])
            return
        # Small kernels (scalar, optimized for size) keep the per-element choice.
        cuts, periods = self._regions(splits, residues=ctx.unroll_short)
        inner = self.order[-1]
        period = periods[inner]
        with ctx.loop(lo, hi, "unit", vectorize=self.inner < ROW_VECTOR_MIN) as unit:
            outer, start, stop = self.unit_bounds(ctx, unit)

            def rows(index: list[ir.Value]) -> None:
                for a, z in cuts[inner]:
                    first, last = start, stop
                    if (a, z) != (0, self.inner):
                        first = ctx.call("llvm.smax.i64", [start, ctx.i64(a)])
                        last = ctx.call("llvm.smin.i64", [stop, ctx.i64(z)])
                    if _by_residues(a, z, period):
                        self._residue_loops(ctx, index, first, last, (a, z), period, body)
                        continue
                    with ctx.loop(first, last, "j") as j, self._assume(ctx, j, inner, a, z):
                        index[inner] = j
                        body(list(index))

            index: list[ir.Value] = [ctx.i64(0)] * self.shape.rank
            for d, v in zip(self.order[:-1], outer, strict=True):
                index[d] = v
            self._outer_regions(ctx, index, cuts, periods, list(self.order[:-1]), rows)

    def _regions(self, splits: Splits | None, residues: bool = True
                 ) -> tuple[dict[int, list[tuple[int, int]]], dict[int, int]]:
        """Per dimension, the [lo, hi) regions to emit apart and the residue period (1: none).

        Residue classes come first (they spare 2^levels work per element, a region only a
        choice), then regions, the contiguous dimension's first (its loops vectorize), then
        outer ones, innermost first, while the copies of the body stay within budget. An outer
        dimension's classes are a switch per row; the contiguous dimension's apply to its long
        regions (runs of short ones become one, emitted plainly), two copies per class."""
        dims = self.shape.dims
        cuts = {d: [(0, dims[d])] for d in range(self.shape.rank)}
        periods = dict.fromkeys(range(self.shape.rank), 1)
        if splits is None:
            return cuts, periods
        total = 1
        for d in reversed(self.order) if residues else ():
            period = splits.periods[d]
            if period == 1:
                continue
            split = _coalesce(regions(splits.points_for(d, period), dims[d]), period)
            if d == self.order[-1]:
                copies = sum(2 * period if _by_residues(a, z, period) else 1 for a, z in split)
                if copies == len(split):
                    continue  # no region long enough
            else:
                copies = len(split) * period
            if total * copies <= MAX_COPIES:
                cuts[d], periods[d] = split, period
                total *= copies
        limit = MAX_COPIES if total > 1 else MAX_REGIONS
        for d in reversed(self.order):
            split = regions(splits.points[d], dims[d])
            if periods[d] == 1 and total * len(split) <= limit:
                cuts[d] = split
                total *= len(split)
        return cuts, periods

    def _residue_loops(self, ctx, index, first, last, region, period, body) -> None:
        """body over [first, last) of the contiguous dimension: a loop over whole periods with
        a copy of the body per residue class, its residue and range assumed, and one loop over
        the elements before the first period and after the last, switching on the residue.
        (A copy emitted for any residue would be the per-element choice, 2^levels deep, that
        residues avoid; copies behind a test of the bounds each ran the whole loop 1.7x
        slower.)"""
        b = ctx.builder
        d, step = self.order[-1], ctx.i64(period)
        aligned = b.mul(b.udiv(b.add(first, ctx.i64(period - 1)), step), step)
        head_end = ctx.call("llvm.smin.i64", [aligned, last])
        tail_start = ctx.call("llvm.smax.i64", [b.mul(b.udiv(last, step), step), head_end])
        with ctx.loop(head_end, tail_start, "jp", step=period, vectorize=False) as base, \
                ctx.assume_residue(base, period, 0):
            for r in range(period):
                j = b.add(base, ctx.i64(r), flags=["nsw"]) if r else base
                with ctx.assume(j, *region):
                    index[d] = j
                    body(list(index))
        head = b.sub(head_end, first)
        edges = b.add(head, b.sub(last, tail_start))
        with ctx.loop(ctx.i64(0), edges, "je", vectorize=False) as k:
            j = b.select(b.icmp_signed("<", k, head), b.add(first, k),
                         b.add(tail_start, b.sub(k, head)))
            done = b.append_basic_block("je.done")
            switch = b.switch(b.urem(j, step), done)
            for r in range(period):
                case = b.append_basic_block(f"je.{r}")
                switch.add_case(ctx.i64(r), case)
                b.position_at_end(case)
                with ctx.assume_residue(j, period, r), ctx.assume(j, *region):
                    index[d] = j
                    body(list(index))
                b.branch(done)
            b.position_at_end(done)

    def _outer_regions(self, ctx, index, cuts, periods, dims: list[int], emit) -> None:
        """emit(index) once per combination of the outer dimensions' regions and residue
        classes, each behind the branches that select it, its ranges and residues assumed."""
        if not dims:
            emit(index)
            return
        d, rest = dims[-1], dims[:-1]
        (a, z), later = cuts[d][0], cuts[d][1:]
        if not later:
            with self._assume(ctx, index[d], d, a, z):
                self._outer_residues(ctx, index, cuts, periods, d, rest, emit)
            return
        b = ctx.builder
        with b.if_else(b.icmp_signed("<", index[d], ctx.i64(z))) as (then, otherwise):
            with then, ctx.assume(index[d], a, z):
                self._outer_residues(ctx, index, cuts, periods, d, rest, emit)
            with otherwise:
                self._outer_regions(ctx, index, {**cuts, d: later}, periods, [*rest, d], emit)

    def _outer_residues(self, ctx, index, cuts, periods, d: int, rest: list[int], emit) -> None:
        """The rest of _outer_regions, once per residue class of outer dimension d (a switch
        on index[d] modulo its period)."""
        period = periods[d]
        if period == 1:
            self._outer_regions(ctx, index, cuts, periods, rest, emit)
            return
        b = ctx.builder
        done = b.append_basic_block("residue.done")
        switch = b.switch(b.urem(index[d], ctx.i64(period)), done)
        for r in range(period):
            case = b.append_basic_block(f"residue.{r}")
            switch.add_case(ctx.i64(r), case)
            b.position_at_end(case)
            with ctx.assume_residue(index[d], period, r):
                self._outer_regions(ctx, index, cuts, periods, rest, emit)
            b.branch(done)
        b.position_at_end(done)

    def _assume(self, ctx, value, d: int, a: int, z: int):
        """ctx.assume for a region, nothing for a dimension that is not split (its code stays
        as it was before regions existed)."""
        if (a, z) == (0, self.shape.dims[d]):
            return contextlib.nullcontext()
        return ctx.assume(value, a, z)


def _by_residues(a: int, z: int, period: int) -> bool:
    return period > 1 and z - a >= RESIDUE_MIN_PERIODS * period


def _coalesce(split: list[tuple[int, int]], period: int) -> list[tuple[int, int]]:
    """Regions with runs of short ones (too short for residue classes) merged into one."""
    out: list[tuple[int, int]] = []
    for a, z in split:
        if out and not _by_residues(*out[-1], period) and not _by_residues(a, z, period):
            out[-1] = (out[-1][0], z)
        else:
            out.append((a, z))
    return out


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

        splits = analyze([item.instr for item in self.items], self.nest.shape.rank)
        self.nest.emit(kb.ctx, lo, hi, body, splits)
