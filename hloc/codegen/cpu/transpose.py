"""Transposes that move the input's contiguous dimension: tiled loops.

The plain loop segment walks the output in memory order, so for a transpose whose input's
innermost (contiguous) dimension is not the output's, every element it reads lies on another
cache line: a 1024 x 512 f32 transpose took 4.8 ms (0.4 GB/s) in a training step. Here the
work units are TILE x TILE tiles of the two dimensions involved (the output's contiguous one,
B, and the one the input keeps contiguous, A), times every position of the other dimensions;
within a tile the loop over B is innermost, so the output is written in order and the input
lines the tile reads (TILE of them) stay in L1 until every element on them is used.

A root reshape of such a transpose that only renames the bytes (both in row-major order: an
attention head split [B*S, H*D] -> [B, H, D, S] -> [B*H, D, S]) is tiled the same way over
the transpose's shape, its elements stored at the same offsets in the output buffer.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Opcode
from ..elemental.compose import flatten
from ..elemental.indexing import delinearize
from ..elemental.memory import major_to_minor, store_element
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec

TILE = 32


@special_segment(Opcode.TRANSPOSE)
def plan_transpose(spec: KernelSpec, item: RootItem):
    if len(item.outputs) != 1 or item.instr.shape.rank < 2:
        return None
    return _plan(spec, item, item.instr, spec.output_shapes[item.outputs[0]])


@special_segment(Opcode.RESHAPE)
def plan_reshaped_transpose(spec: KernelSpec, item: RootItem):
    """reshape(transpose(x)) where both are row-major: the transpose's tiles."""
    instr = item.instr
    inner = instr.operands[0]
    if len(item.outputs) != 1 or inner.opcode != Opcode.TRANSPOSE or inner.shape.rank < 2:
        return None
    out_shape = spec.output_shapes[item.outputs[0]]
    if not (_row_major(out_shape) and _row_major(inner.shape)):
        return None
    return _plan(spec, item, inner, inner.shape)


def _row_major(shape) -> bool:
    return major_to_minor(shape) == list(range(shape.rank))


def _plan(spec: KernelSpec, item: RootItem, transpose, shape):
    """The tiled segment of `transpose` stored as `shape` (the output's bytes), or None."""
    b_dim = major_to_minor(shape)[-1]
    a_dim = list(transpose.dimensions).index(major_to_minor(transpose.operands[0].shape)[-1])
    if a_dim == b_dim or min(shape.dims[a_dim], shape.dims[b_dim]) < 8:
        return None  # the plain loop reads the input in order already, or rows are tiny
    return TransposeSegment(spec, item, transpose, shape, (a_dim, b_dim))


class TransposeSegment(Segment):
    """Tiles of `transpose`, stored through `shape` into the item's output."""

    kind = "transpose"

    def __init__(self, spec: KernelSpec, item: RootItem, transpose, shape, dims_ab):
        self.spec, self.item, self.transpose = spec, item, transpose
        self.a_dim, self.b_dim = dims_ab
        self.shape = shape
        dims = self.shape.dims
        self.others = [d for d in major_to_minor(self.shape) if d not in dims_ab]
        self.tiles = [-(-dims[self.a_dim] // TILE), -(-dims[self.b_dim] // TILE)]
        self.extent = math.prod(dims[d] for d in self.others) * math.prod(self.tiles)

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx = kb.ctx
        b = ctx.builder
        dims = self.shape.dims
        out = self.item.outputs[0]
        with ctx.loop(lo, hi, "tile") as unit:
            position = delinearize(b, unit, [dims[d] for d in self.others] + self.tiles,
                                   fold_unit_dims=False)
            index: list[ir.Value] = [ctx.i64(0)] * self.shape.rank
            for d, v in zip(self.others, position, strict=False):
                index[d] = v
            bounds = []
            for d, tile in ((self.a_dim, position[-2]), (self.b_dim, position[-1])):
                start = b.mul(tile, ctx.i64(TILE), flags=["nsw"])
                stop = ctx.call("llvm.smin.i64", [b.add(start, ctx.i64(TILE)), ctx.i64(dims[d])])
                bounds.append((start, stop))
            with ctx.loop(*bounds[0], "ta") as a:
                with ctx.loop(*bounds[1], "tb") as j:
                    index[self.a_dim], index[self.b_dim] = a, j
                    (value,) = flatten(kb.gen(self.transpose)(list(index)))
                    store_element(ctx, self.shape, kb.outputs[out], list(index), value)
