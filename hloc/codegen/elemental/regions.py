"""Index regions and residues: where a concatenate or a pad changes what an element reads.

An element of `jnp.roll(x, 1)` reads one operand of a concatenate in its first column and
another in the rest. Emitted per element, that choice is a branch (or a select) inside the
loop, and LLVM vectorizes such a read as a gather. `analyze` finds, for every dimension of a
fused computation's output, the indices where a concatenate or pad reached through
index-affine ops (elementwise ops, slices, broadcasts, transposes, reverses, reshapes that
keep the dimension) changes its choice. A loop nest split at those points runs each region
under `EmitContext.assume`, and the concatenate and pad lowerings then read the one operand
that the region's index range fixes (`EmitContext.value_range`), with plain affine loads.

Interior padding interleaves: `lax.associative_scan` builds each level of its down-sweep as
`pad(a, interior 1) + pad(b, low 1, interior 1)`, nested once per level. An element then
reads one side or the other by the parity of its index, and a per-element select computes
both sides, 2^levels chains deep. `analyze` also finds, per dimension, the period whose
residue classes fix every such choice (the product of the interior steps along the way); a
loop emitting one copy of its body per residue class (`EmitContext.assume_residue`) lets the
pad lowering read one side with an exact quotient, and none of the others.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...ir import Instruction, Opcode
from ...ir.opcodes import ELEMENTWISE
from ...util.record import dataclass
from .indexing import reshape_groups

# One dimension of an instruction as a function of the root's index: (root dimension, scale,
# offset, denominator, deep), the instruction's index being (scale * root[dimension] +
# offset) / denominator: exact within a residue class below interior padding, to within one
# element across classes; deep once the path went through interior padding. None when it is
# no such function (the dimension is then not followed).
Affine = tuple[int, int, int, int, bool] | None
# Instructions visited per analysis, at most: a fusion is small, this only bounds odd graphs.
VISIT_LIMIT = 4096
# The longest period analyze proposes: a body copy per residue class.
MAX_PERIOD = 16


@dataclass(frozen=True)
class Splits:
    """What `analyze` found, per dimension of the roots' common output shape."""

    points: list[set[int]]  # region starts (may include 0 and points past the end)
    deep: list[set[int]]  # region starts found below interior padding
    periods: list[int]  # residue classes that fix every interior padding's choice (1: none)

    def points_for(self, d: int, period: int) -> set[int]:
        """The region starts worth splitting at when dimension d is emitted in `period`
        residue classes: those below interior padding only mean something then."""
        return self.points[d] | self.deep[d] if period > 1 else self.points[d]


class _Walk:
    def __init__(self, rank: int):
        self.points: list[set[int]] = [set() for _ in range(rank)]
        self.deep: list[set[int]] = [set() for _ in range(rank)]
        self.needs: list[set[int]] = [set() for _ in range(rank)]

    def boundary(self, a: tuple, at: int) -> None:
        """Record the root index where (scale * root + offset) / denominator first reaches
        `at` (moving up for a positive scale, down for a negative one)."""
        dim, scale, offset, den, deep = a
        x = at * den - offset
        if scale > 0:
            point = -(-x // scale)  # the least i with scale * i >= x
        elif scale < 0:
            point = x // scale + 1  # one past the greatest i with scale * i >= x
        else:
            return
        (self.deep if deep else self.points)[dim].add(point)


def affine(dim: int, scale: int, offset: int, den: int, deep: bool) -> Affine:
    """A map in lowest terms (equal maps compare equal)."""
    g = math.gcd(scale, offset, den)
    return dim, scale // g, offset // g, den // g, deep


def analyze(roots: Sequence[Instruction], rank: int) -> Splits:
    """Region starts and residue periods of the roots' common output shape."""
    walk = _Walk(rank)
    start = tuple((d, 1, 0, 1, False) for d in range(rank))
    stack = [(root, start) for root in roots if root.shape.rank == rank]
    seen: set[tuple] = set()
    while stack and len(seen) < VISIT_LIMIT:
        instr, amap = stack.pop()
        key = (id(instr), amap)
        if key in seen or not any(amap):
            continue
        seen.add(key)
        stack.extend(_operand_maps(instr, amap, walk))
    return Splits(walk.points, walk.deep, [_period(n) for n in walk.needs])


def split_points(roots: Sequence[Instruction], rank: int) -> list[set[int]]:
    """Per dimension, the region starts that need no residue classes."""
    return analyze(roots, rank).points


def _period(needs: set[int]) -> int:
    """The least common multiple of the periods needed, the shortest first, while it stays
    within MAX_PERIOD (the longer ones, deeper in the computation, then choose per element)."""
    period = 1
    for n in sorted(needs):
        if math.lcm(period, n) <= MAX_PERIOD:
            period = math.lcm(period, n)
    return period


def _operand_maps(instr: Instruction, amap: tuple[Affine, ...], walk: _Walk):
    """(operand, its dimensions' maps) for the operands `instr` reads by affine index; adds
    the root indices where `instr` itself changes region to the walk's points."""
    if instr.opcode in ELEMENTWISE:
        return [(o, amap) for o in instr.operands if o.shape.rank == len(amap)]
    follow = _FOLLOW.get(instr.opcode)
    return follow(instr, amap, walk) if follow is not None else []


def _slice(instr, amap, walk):
    return [(instr.operands[0], tuple(
        None if a is None else affine(a[0], a[1] * s.stride, a[2] * s.stride + s.start * a[3],
                                      a[3], a[4])
        for a, s in zip(amap, instr.attrs.slice, strict=True)))]


def _broadcast(instr, amap, walk):
    return [(instr.operands[0], tuple(amap[d] for d in instr.dimensions))]


def _transpose(instr, amap, walk):
    operand: list[Affine] = [None] * len(amap)
    for i, d in enumerate(instr.dimensions):
        operand[d] = amap[i]
    return [(instr.operands[0], tuple(operand))]


def _reverse(instr, amap, walk):
    flipped = list(amap)
    for d in instr.dimensions:
        a = amap[d]
        if a is not None:
            flipped[d] = affine(a[0], -a[1], (instr.shape.dims[d] - 1) * a[3] - a[2], a[3], a[4])
    return [(instr.operands[0], tuple(flipped))]


def _reshape(instr, amap, walk):
    src = instr.operands[0].shape.dims
    operand: list[Affine] = [None] * len(src)
    for gs, gd in reshape_groups(tuple(src), tuple(instr.shape.dims)):
        if len(gs) == 1 and len(gd) == 1:
            operand[gs[0]] = amap[gd[0]]
    return [(instr.operands[0], tuple(operand))]


def _concatenate(instr, amap, walk):
    axis = instr.dimensions[0]
    a = amap[axis]
    out, start = [], 0
    for operand in instr.operands:
        n = operand.shape.dims[axis]
        if a is not None and start:
            walk.boundary(a, start)
        shifted = list(amap)
        if a is not None:
            shifted[axis] = affine(a[0], a[1], a[2] - start * a[3], a[3], a[4])
        out.append((operand, tuple(shifted)))
        start += n
    return out


def _pad(instr, amap, walk):
    operand = instr.operands[0]
    shifted = list(amap)
    for d, (a, p) in enumerate(zip(amap, instr.attrs.padding, strict=True)):
        if a is None:
            continue
        dim, scale, offset, den, deep = a
        if p.interior:
            # Element t = index - low is the operand's t / step where step divides t.
            # Residue classes of the root's index modulo the denominator of scale / (den *
            # step) fix t's residue; below, the operand's index is t / step.
            step = p.interior + 1
            walk.needs[dim].add(den * step // math.gcd(scale, den * step))
            end = p.low + (operand.shape.dims[d] - 1) * step + 1
            deep_a = (dim, scale, offset, den, True)
            walk.boundary(deep_a, p.low)
            walk.boundary(deep_a, end)
            shifted[d] = affine(dim, scale, offset - p.low * den, den * step, True)
            continue
        walk.boundary(a, p.low)
        walk.boundary(a, p.low + operand.shape.dims[d])
        shifted[d] = affine(dim, scale, offset - p.low * den, den, deep)
    return [(operand, tuple(shifted))]


def _reduce_window(instr, amap, walk):
    """The outputs where windows start and stop reaching padding: in between, taps need no
    test (the reduce-window lowering reads value_range). Its operand is not followed."""
    for a, wd, n in zip(amap, instr.attrs.window.dims, instr.operands[0].shape.dims,
                        strict=True):
        if a is not None and wd.base_dilation == 1:
            for at in window_interior(wd, n):
                walk.boundary(a, at)
    return []


def window_interior(wd, n_in: int) -> tuple[int, int]:
    """[lo, hi): the outputs whose windows along one dimension lie inside the operand (base
    dilation 1)."""
    lo = -(-wd.padding_low // wd.stride)
    hi = (n_in - 1 + wd.padding_low - (wd.size - 1) * wd.window_dilation) // wd.stride + 1
    return lo, hi


def regions(points: set[int], size: int) -> list[tuple[int, int]]:
    """[lo, hi) intervals covering range(size), split at the points inside it."""
    cuts = [0, *sorted(p for p in points if 0 < p < size), size]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


_FOLLOW = {Opcode.SLICE: _slice, Opcode.BROADCAST: _broadcast, Opcode.TRANSPOSE: _transpose,
           Opcode.REVERSE: _reverse, Opcode.RESHAPE: _reshape, Opcode.CONCATENATE: _concatenate,
           Opcode.PAD: _pad, Opcode.REDUCE_WINDOW: _reduce_window}
