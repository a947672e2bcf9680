"""Index regions: where a concatenate or a pad changes what an output element reads.

An element of `jnp.roll(x, 1)` reads one operand of a concatenate in its first column and
another in the rest. Emitted per element, that choice is a branch (or a select) inside the
loop, and LLVM vectorizes such a read as a gather. `split_points` finds, for every dimension
of a fused computation's output, the indices where a concatenate or pad reached through
index-affine ops (elementwise ops, slices, broadcasts, transposes, reverses, reshapes that
keep the dimension) changes its choice. A loop nest split at those points runs each region
under `EmitContext.assume`, and the concatenate and pad lowerings then read the one operand
that the region's index range fixes (`EmitContext.value_range`), with plain affine loads.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...ir import Instruction, Opcode
from ...ir.opcodes import ELEMENTWISE
from .indexing import reshape_groups

# One dimension of an instruction as a function of the root's index: (root dimension, scale,
# offset), the instruction's index being scale * root[dimension] + offset; None when it is
# no such function (the dimension is then not followed).
Affine = tuple[int, int, int] | None
# Instructions visited per analysis, at most: a fusion is small, this only bounds odd graphs.
VISIT_LIMIT = 4096


def split_points(roots: Sequence[Instruction], rank: int) -> list[set[int]]:
    """Per dimension of the roots' common output shape, the indices where some concatenate
    or pad below them starts a new region (may include 0 and points past the end)."""
    points: list[set[int]] = [set() for _ in range(rank)]
    start = tuple((d, 1, 0) for d in range(rank))
    stack = [(root, start) for root in roots if root.shape.rank == rank]
    seen: set[tuple] = set()
    while stack and len(seen) < VISIT_LIMIT:
        instr, amap = stack.pop()
        key = (id(instr), amap)
        if key in seen or not any(amap):
            continue
        seen.add(key)
        stack.extend(_operand_maps(instr, amap, points))
    return points


def _operand_maps(instr: Instruction, amap: tuple[Affine, ...], points: list[set[int]]):
    """(operand, its dimensions' maps) for the operands `instr` reads by affine index; adds
    the root indices where `instr` itself changes region to `points`."""
    if instr.opcode in ELEMENTWISE:
        return [(o, amap) for o in instr.operands if o.shape.rank == len(amap)]
    follow = _FOLLOW.get(instr.opcode)
    return follow(instr, amap, points) if follow is not None else []


def _slice(instr, amap, points):
    return [(instr.operands[0], tuple(
        None if a is None else (a[0], a[1] * s.stride, a[2] * s.stride + s.start)
        for a, s in zip(amap, instr.attrs.slice, strict=True)))]


def _broadcast(instr, amap, points):
    return [(instr.operands[0], tuple(amap[d] for d in instr.dimensions))]


def _transpose(instr, amap, points):
    operand: list[Affine] = [None] * len(amap)
    for i, d in enumerate(instr.dimensions):
        operand[d] = amap[i]
    return [(instr.operands[0], tuple(operand))]


def _reverse(instr, amap, points):
    flipped = list(amap)
    for d in instr.dimensions:
        a = amap[d]
        if a is not None:
            flipped[d] = (a[0], -a[1], instr.shape.dims[d] - 1 - a[2])
    return [(instr.operands[0], tuple(flipped))]


def _reshape(instr, amap, points):
    src = instr.operands[0].shape.dims
    operand: list[Affine] = [None] * len(src)
    for gs, gd in reshape_groups(tuple(src), tuple(instr.shape.dims)):
        if len(gs) == 1 and len(gd) == 1:
            operand[gs[0]] = amap[gd[0]]
    return [(instr.operands[0], tuple(operand))]


def _concatenate(instr, amap, points):
    axis = instr.dimensions[0]
    a = amap[axis]
    out, start = [], 0
    for operand in instr.operands:
        n = operand.shape.dims[axis]
        if a is not None and start:
            _add_boundary(points, a, start)
        shifted = list(amap)
        if a is not None:
            shifted[axis] = (a[0], a[1], a[2] - start)
        out.append((operand, tuple(shifted)))
        start += n
    return out


def _pad(instr, amap, points):
    operand = instr.operands[0]
    shifted = list(amap)
    for d, (a, p) in enumerate(zip(amap, instr.attrs.padding, strict=True)):
        if a is None:
            continue
        if p.interior:
            shifted[d] = None
            continue
        _add_boundary(points, a, p.low)
        _add_boundary(points, a, p.low + operand.shape.dims[d])
        shifted[d] = (a[0], a[1], a[2] - p.low)
    return [(operand, tuple(shifted))]


def _add_boundary(points: list[set[int]], a: tuple[int, int, int], boundary: int) -> None:
    """Record the root index where scale * root + offset first reaches `boundary` (moving
    up for scale 1, down for scale -1); other scales are not split."""
    dim, scale, offset = a
    if scale == 1:
        points[dim].add(boundary - offset)
    elif scale == -1:
        points[dim].add(offset - boundary + 1)


def regions(points: set[int], size: int) -> list[tuple[int, int]]:
    """[lo, hi) intervals covering range(size), split at the points inside it."""
    cuts = [0, *sorted(p for p in points if 0 < p < size), size]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


_FOLLOW = {Opcode.SLICE: _slice, Opcode.BROADCAST: _broadcast, Opcode.TRANSPOSE: _transpose,
           Opcode.REVERSE: _reverse, Opcode.RESHAPE: _reshape, Opcode.CONCATENATE: _concatenate,
           Opcode.PAD: _pad}
