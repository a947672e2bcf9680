"""Work units over an output's rows, each a block of positions along its contiguous dimension.

A segment that keeps one accumulator per output position on the stack (a scan, a window
swept a row at a time) runs a unit per (row, block): the row is an index of the output's
other dimensions (`outer`), the block up to `block` consecutive positions of `col`. Without
`col`, a unit is one row (one position).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Shape
from ...util.record import dataclass
from ..elemental.indexing import delinearize


@dataclass(frozen=True)
class RowBlocks:
    dims: tuple[int, ...]  # the output's dimensions
    outer: tuple[int, ...]  # the dimensions a row index covers, major first
    col: int | None  # the dimension swept in blocks (None: one position a unit)
    block: int  # positions a block (at most)
    blocks: int  # blocks a row

    @staticmethod
    def of(shape: Shape, outer: list[int], col: int | None, most: int) -> RowBlocks:
        n_col = 1 if col is None else shape.dims[col]
        block = min(n_col, most)
        blocks = -(-n_col // block) if block else 0
        return RowBlocks(tuple(shape.dims), tuple(outer), col, block, blocks)

    @property
    def extent(self) -> int:
        return math.prod(self.dims[d] for d in self.outer) * self.blocks

    def unit(self, ctx, unit: ir.Value) -> tuple[list[ir.Value], ir.Value, ir.Value]:
        """(the output index of the unit's row, zero along `col`; the block's [start, stop))."""
        b = ctx.builder
        row = b.udiv(unit, ctx.i64(self.blocks)) if self.blocks > 1 else unit
        index: list[ir.Value] = [ctx.i64(0)] * len(self.dims)
        digits = delinearize(b, row, [self.dims[d] for d in self.outer], fold_unit_dims=False)
        for d, v in zip(self.outer, digits, strict=True):
            index[d] = v
        if self.col is None:
            return index, ctx.i64(0), ctx.i64(1)
        start = (b.mul(b.urem(unit, ctx.i64(self.blocks)), ctx.i64(self.block))
                 if self.blocks > 1 else ctx.i64(0))
        stop = ctx.call("llvm.smin.i64", [b.add(start, ctx.i64(self.block)),
                                          ctx.i64(self.dims[self.col])])
        return index, start, stop
