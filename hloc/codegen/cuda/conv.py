"""Direct convolution as an elemental lowering for the CUDA target.

Each output element sums input x kernel over the kernel's input features and window taps,
so a convolution (alone or fused) runs in the loop kernel, one thread per output element.
XLA semantics: feature groups split input and output features, batch groups split the input
batch and the output features (group = output feature / (O / (G * BG)), batch-group major),
a window tap k reads the base-dilated, padded input at o * stride + k * window_dilation -
padding_low (skipped unless it hits a real element), window_reversal flips the taps.
Products accumulate in f32 (f64 for f64, 64-bit integers for integers), like the dot.
"""

from __future__ import annotations

import functools
import math

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, Shape
from ...util.record import dataclass
from ..elemental.convert import convert_value
from ..elemental.reduction import accumulate_loops
from ..elemental.registry import emits
from ..elemental.scalar import const
from ..elemental.types import I1, elem_type
from ..elemental.windows import TapSequence, window_tap
from .gemm import compute_type


@dataclass(frozen=True)
class Tile:
    """`count` neighbouring output elements along output dim `dim` that one thread sums
    together (ConvTerms.add_tile): the convolution's output batch dim (the elements read
    different lhs batch elements, the same rhs) or its output feature dim (different kernel
    output features, the same lhs). The planner keeps a tile inside one feature group."""

    dim: int
    count: int

    @staticmethod
    def fitting(shape: Shape, dim: int, most: int, least: int) -> Tile | None:
        """The tile of `most` elements along `dim` of `shape`, halved until it divides the dim
        and `shape` holds at least `least` tiles; None once that leaves 1."""
        count = most
        while count > 1 and (shape.dims[dim] % count or shape.num_elements // count < least):
            count //= 2
        return Tile(dim, count) if count > 1 else None

    def starts(self, shape: Shape) -> Shape:
        """`shape` with an element per tile (its first): dim `dim` divided by `count`."""
        return shape.with_dims(tuple(n // self.count if d == self.dim else n
                                     for d, n in enumerate(shape.dims)))

    def first(self, ctx, start) -> list:
        """The index of the first element of the tile at index `start` of `starts(shape)`."""
        return [ctx.builder.mul(v, ctx.i64(self.count)) if d == self.dim and self.count > 1 else v
                for d, v in enumerate(start)]

    def at(self, ctx, index, j: int) -> list:
        """Element j of the tile whose first element is `index`."""
        return shifted(ctx, index, self.dim, j)


def shifted(ctx, index, dim: int, j: int) -> list:
    """`index` with j added to its dim `dim`."""
    return [ctx.builder.add(v, ctx.i64(j)) if d == dim and j else v for d, v in enumerate(index)]


def recipe_tile(recipe, conv: Instruction) -> Tile | None:
    """The tile a kernel recipe's `tile` and `tile_dim` parameters give convolution `conv`
    (None without one); ValueError for a dim no output dim is."""
    count = recipe.param("tile", 1)
    if count <= 1:
        return None
    dim = recipe.param("tile_dim")
    dn = conv.attrs.conv_dnums
    if dim not in (dn.output_batch_dimension, dn.output_feature_dimension):
        raise ValueError(f"tile_dim {dim} is neither the output's batch nor feature dim")
    return Tile(dim, count)


class ConvTerms:
    """The terms of a convolution's output elements: term (c, taps...) of output `index` is
    lhs[...] * rhs[...] for input feature c of the element's group and one window tap per
    spatial dimension (zero where the tap falls on padding or between dilated elements).

    With a `tile` (Tile) each `index` stands for that many neighbouring output elements
    along the output's batch or feature dim, summed together: they share every term's
    window taps, checks and one operand's load (add_tile)."""

    def __init__(self, ctx, instr: Instruction, gens, tile: Tile | None = None):
        self.ctx = ctx
        self.tile = tile or Tile(instr.attrs.conv_dnums.output_feature_dimension, 1)
        self.lhs_gen, self.rhs_gen = gens
        self.dn = instr.attrs.conv_dnums
        self.window = instr.attrs.window.dims
        self.lhs, self.rhs = instr.operands[0].shape, instr.operands[1].shape
        self.out_et = elem_type(instr.shape.element_type)
        if self.out_et.kind == "pred":
            raise UnsupportedError(f"pred convolution %{instr.name}")
        self.cet = compute_type(instr)
        self.l_et, self.r_et = elem_type(self.lhs.element_type), elem_type(self.rhs.element_type)
        self.groups = instr.attrs.feature_group_count or 1
        batch_groups = instr.attrs.batch_group_count or 1
        self.cg = self.rhs.dims[self.dn.kernel_input_feature_dimension]
        self.og = instr.shape.dims[self.dn.output_feature_dimension] // (self.groups * batch_groups)
        self.nb = self.lhs.dims[self.dn.input_batch_dimension] // batch_groups
        # The reduction's axes (0: input feature of the group, 1 + i: window tap i), major to
        # minor in the order of the lhs dims they walk in memory: the innermost loop (and the
        # neighbouring threads of conv.split) then read neighbouring lhs elements.
        walks = [self.dn.input_feature_dimension] + list(self.dn.input_spatial_dimensions)
        position = {d: k for k, d in enumerate(reversed(self.lhs.layout.minor_to_major))} \
            if self.lhs.layout is not None else {d: d for d in range(self.lhs.rank)}
        self.axes = sorted(range(len(walks)), key=lambda a: position[walks[a]])
        natural = [self.cg] + [wd.size for wd in self.window]
        self.sizes = [natural[a] for a in self.axes]
        self.count = math.prod(self.sizes)

    def zero(self) -> ir.Value:
        return const(self.cet, 0)

    def element(self, index) -> tuple:
        """What every term of output element `index` shares."""
        b, ctx, dn = self.ctx.builder, self.ctx, self.dn
        o = index[dn.output_feature_dimension]
        q = b.udiv(o, ctx.i64(max(1, self.og)))
        bg, g = b.udiv(q, ctx.i64(self.groups)), b.urem(q, ctx.i64(self.groups))
        in_batch = b.add(b.mul(bg, ctx.i64(self.nb)), index[dn.output_batch_dimension])
        return index, o, g, in_batch

    def tap_sequences(self, index) -> list[TapSequence | None]:
        """Per spatial dimension of output element `index`: the taps that can land on an input
        element where the dimension is base-dilated (TapSequence), else None (every tap)."""
        dn, lhs = self.dn, self.lhs
        return [TapSequence.of(self.ctx, index[dn.output_spatial_dimensions[i]], wd,
                               lhs.dims[dn.input_spatial_dimensions[i]])
                if wd.base_dilation > 1 else None for i, wd in enumerate(self.window)]

    def bounds(self, seqs: list[TapSequence | None]) -> list[tuple[ir.Value, ir.Value]]:
        """The reduction loops' bounds (in the order of `sizes`) when base-dilated dimensions
        visit only their TapSequence: a per-element trip count instead of the window size."""
        zero = self.ctx.i64(0)
        natural = [(zero, self.ctx.i64(self.cg))] + [
            (zero, self.ctx.i64(wd.size)) if seq is None else (seq.start, seq.stop)
            for wd, seq in zip(self.window, seqs, strict=True)]
        return [natural[a] for a in self.axes]

    def add(self, element: tuple, ivs, acc: ir.Value,
            seqs: list[TapSequence | None] | None = None) -> ir.Value:
        """acc + the term of `element` at reduction position `ivs` (one value per axis, in
        the order of `sizes`). Without `seqs` a spatial iv is the window tap; with them, a
        base-dilated dimension's iv is the position in its TapSequence (loops from `bounds`)."""
        (out,) = self.add_tile(element, ivs, [acc], seqs)
        return out

    def add_tile(self, element: tuple, ivs, accs: list[ir.Value],
                 seqs: list[TapSequence | None] | None = None) -> list[ir.Value]:
        """`add` for each element of the tile starting at `element` (accs: one per element,
        in tile order)."""
        ctx = self.ctx
        index = element[0]
        natural = [ivs[self.axes.index(a)] for a in range(len(self.axes))]
        seqs = seqs or [None] * len(self.window)
        taps = []
        for i, (wd, iv, seq) in enumerate(zip(self.window, natural[1:], seqs, strict=True)):
            size = self.lhs.dims[self.dn.input_spatial_dimensions[i]]
            if seq is not None:
                tap, pos = seq.tap(ctx, iv)
                taps.append((tap, None, pos))  # in bounds by construction
                continue
            ok, pos = window_tap(ctx, index[self.dn.output_spatial_dimensions[i]], iv, wd, size)
            taps.append((iv, ok, pos))
        return self._terms(element, natural[0], taps, accs)

    def _terms(self, element: tuple, c: ir.Value, taps: list,
               accs: list[ir.Value]) -> list[ir.Value]:
        """accs + lhs * rhs at input feature c and one (tap, valid, input position) per
        spatial dimension, for each element of the tile; accs where a tap is invalid (valid
        None: always valid)."""
        ctx, b, dn, lhs, rhs = self.ctx, self.ctx.builder, self.dn, self.lhs, self.rhs
        _, o, g, in_batch = element
        li = [ctx.i64(0)] * lhs.rank
        ri = [ctx.i64(0)] * rhs.rank
        li[dn.input_batch_dimension] = in_batch
        li[dn.input_feature_dimension] = b.add(b.mul(g, ctx.i64(self.cg)), c)
        ri[dn.kernel_output_feature_dimension] = o
        ri[dn.kernel_input_feature_dimension] = c
        checks = [ok for _, ok, _ in taps if ok is not None]
        for i, (wd, (tap, _, pos)) in enumerate(zip(self.window, taps, strict=True)):
            li[dn.input_spatial_dimensions[i]] = pos
            ri[dn.kernel_spatial_dimensions[i]] = (
                b.sub(ctx.i64(wd.size - 1), tap) if wd.window_reversal else tap)

        def loads(gen, et, index, at: int, walked: bool) -> list[ir.Value]:
            """The operand's values for each tile element: one load unless the tile walks
            the output dim that is its dim `at` (then index[at] + j)."""
            if not walked:
                return [convert_value(ctx, et, self.cet, gen(index))] * len(accs)
            return [convert_value(ctx, et, self.cet, gen(shifted(ctx, index, at, j)))
                    for j in range(len(accs))]

        def products() -> list[ir.Value]:
            tiled = self.tile.dim if len(accs) > 1 else -1
            xs = loads(self.lhs_gen, self.l_et, li, dn.input_batch_dimension,
                       tiled == dn.output_batch_dimension)
            ys = loads(self.rhs_gen, self.r_et, ri, dn.kernel_output_feature_dimension,
                       tiled == dn.output_feature_dimension)
            mul, add = (b.fmul, b.fadd) if self.cet.is_float else (b.mul, b.add)
            return [add(acc, mul(x, y)) for acc, x, y in zip(accs, xs, ys, strict=True)]

        if not checks:
            return products()
        valid = functools.reduce(b.and_, checks, ir.Constant(I1, 1))
        return ctx.select_branches(valid, products, lambda: accs)

    def combine(self, a: ir.Value, c: ir.Value) -> ir.Value:
        b = self.ctx.builder
        return b.fadd(a, c) if self.cet.is_float else b.add(a, c)

    def finish(self, acc: ir.Value) -> ir.Value:
        return convert_value(self.ctx, self.cet, self.out_et, acc)


@emits(Opcode.CONVOLUTION, target="cuda")
def convolution(ctx, instr: Instruction, gens):
    tiled = tile_generator(ctx, instr, gens, None)
    return lambda index: tiled(index)[0]


def tile_generator(ctx, instr: Instruction, gens, tile: Tile | None):
    """index -> the values of the `tile` of output elements starting at `index` (one element
    without a tile), each summed serially over its terms."""
    terms = ConvTerms(ctx, instr, gens, tile)
    count = tile.count if tile is not None else 1

    def generate(index) -> list[ir.Value]:
        if terms.count == 0:
            return [terms.finish(terms.zero())] * count
        element = terms.element(index)
        # Base-dilated dimensions visit only the taps that can hit an input element (a
        # transposed convolution's window is mostly holes); conv_split's flattened loops,
        # with their fixed term count, keep visiting every tap.
        seqs = terms.tap_sequences(index)
        accs = accumulate_loops(ctx, terms.bounds(seqs), [terms.zero()] * count,
                                lambda ivs, accs: terms.add_tile(element, ivs, accs, seqs))
        return [terms.finish(acc) for acc in accs]

    return generate
