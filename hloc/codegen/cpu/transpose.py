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
from ..elemental.types import elem_type
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec

TILE = 32
# Tiles are staged (computed in the input's order first) only over input rows this long.
STAGE_MIN_ROW = 16


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


@special_segment(Opcode.CONVERT)
def plan_converted_transpose(spec: KernelSpec, item: RootItem):
    """convert(...convert(transpose(x))): a mixed-precision gradient's transposed result
    rounded to bf16 and back (a 256 x 128 output took 6 ns an element walked in output
    order, its five operands read a row apart). The transpose's tiles, each element the
    root's value at the transpose's index."""
    transpose = item.instr
    while transpose.opcode == Opcode.CONVERT:
        transpose = transpose.operands[0]
    if len(item.outputs) != 1 or transpose.opcode != Opcode.TRANSPOSE or transpose.shape.rank < 2:
        return None
    return _plan(spec, item, transpose, spec.output_shapes[item.outputs[0]], value=item.instr)


def _row_major(shape) -> bool:
    return major_to_minor(shape) == list(range(shape.rank))


def _plan(spec: KernelSpec, item: RootItem, transpose, shape, value=None):
    """The tiled segment of `transpose` stored as `shape` (the output's bytes), or None;
    `value`: the instruction whose element is stored at each of the transpose's indices (the
    transpose itself by default)."""
    b_dim = major_to_minor(shape)[-1]
    a_dim = list(transpose.dimensions).index(major_to_minor(transpose.operands[0].shape)[-1])
    if a_dim == b_dim or min(shape.dims[a_dim], shape.dims[b_dim]) < 8:
        return None  # the plain loop reads the input in order already, or rows are tiny
    return TransposeSegment(spec, item, transpose, shape, (a_dim, b_dim), value or transpose)


class TransposeSegment(Segment):
    """Tiles of `transpose`, each element `value`'s, stored through `shape` into the item's
    output."""

    kind = "transpose"

    def __init__(self, spec: KernelSpec, item: RootItem, transpose, shape, dims_ab, value):
        self.spec, self.item, self.transpose, self.value = spec, item, transpose, value
        self.a_dim, self.b_dim = dims_ab
        self.shape = shape
        dims = self.shape.dims
        self.others = [d for d in major_to_minor(self.shape) if d not in dims_ab]
        self.tiles = [-(-dims[self.a_dim] // TILE), -(-dims[self.b_dim] // TILE)]
        self.extent = math.prod(dims[d] for d in self.others) * math.prod(self.tiles)
        # Work before the transpose (a fused elementwise body): each tile is computed in the
        # input's order into a stack buffer, vectorized with contiguous loads, then stored
        # transposed; computed in the output's order, every operand was read a row apart.
        # Only where the input's rows are long enough to vectorize over: a per-example
        # gradient's [64,32,10] -> [64,10,32] product of broadcasts (rows of 10) got slower.
        self.staged = (transpose.operands[0].opcode != Opcode.PARAMETER
                       and dims[self.a_dim] >= STAGE_MIN_ROW
                       and not elem_type(value.shape.element_type, complex_ok=True).is_complex)

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
            if self.staged:
                self._emit_staged(kb, index, bounds)
                return
            with ctx.loop(*bounds[0], "ta", unroll=False) as a:
                with ctx.loop(*bounds[1], "tb") as j:
                    index[self.a_dim], index[self.b_dim] = a, j
                    (value,) = flatten(kb.gen(self.value)(list(index)))
                    store_element(ctx, self.shape, kb.outputs[out], list(index), value)

    def _emit_staged(self, kb: KernelBuild, index: list[ir.Value], bounds) -> None:
        """One tile in two passes: values in the input's order (a innermost) into a
        TILE x TILE buffer, then the buffer into the output in its order (b innermost)."""
        ctx = kb.ctx
        b = ctx.builder
        (a_lo, a_hi), (b_lo, b_hi) = bounds
        value_type = elem_type(self.value.shape.element_type).value_type
        buffer = ctx.alloca(value_type, TILE * TILE, name="tile")

        def slot(a: ir.Value, j: ir.Value) -> ir.Value:
            at = b.add(b.mul(b.sub(j, b_lo), ctx.i64(TILE)), b.sub(a, a_lo))
            return b.gep(buffer, [at], inbounds=True, source_etype=value_type)

        # Each pass vectorizes its inner loop only: LLVM unrolled a short inner one (16
        # columns) and vectorized the outer loop across rows, a scatter per vector.
        with ctx.loop(b_lo, b_hi, "sb", vectorize=False) as j, ctx.loop(a_lo, a_hi, "sa") as a:
            index[self.a_dim], index[self.b_dim] = a, j
            (value,) = flatten(kb.gen(self.value)(list(index)))
            b.store(value, slot(a, j))
        # A compiler barrier between the passes: LLVM may otherwise forward the buffer's
        # stores to the second pass's loads, back to strided stores.
        b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}",
                            side_effect=True), [])
        with ctx.loop(a_lo, a_hi, "ta", vectorize=False) as a, ctx.loop(b_lo, b_hi, "tb") as j:
            index[self.a_dim], index[self.b_dim] = a, j
            value = b.load(slot(a, j), typ=value_type)
            store_element(ctx, self.shape, kb.outputs[self.item.outputs[0]], list(index), value)
