"""Algebraic-simplifier rules for data-movement ops: reshape, transpose, broadcast, slice,
concatenate, pad, reverse, copy and iota. All of them only remap indices, so every rule is
exact by construction; each checks the shapes that make the remapping the same."""

from __future__ import annotations

from ...ir import Opcode, SliceDim
from ..rewrite import P, RuleTable, new, splat

Op = Opcode
SHAPE_RULES = RuleTable("simplifier-shape")
rule = SHAPE_RULES.rule


def _operand(instr):
    return instr.operands[0]


# ---- reshape ---------------------------------------------------------------------------------
@rule(P(Op.RESHAPE, where=lambda i: _operand(i).shape.dims == i.shape.dims))
def reshape_noop(instr):
    """reshape(x) → x when the dimensions do not change."""
    return _operand(instr)


@rule(P(Op.RESHAPE, P(Op.RESHAPE)))
def reshape_reshape(instr):
    """reshape(reshape(x)) → reshape(x): row-major order is kept by both."""
    return new(Op.RESHAPE, instr.shape, [_operand(_operand(instr))])


@rule(P(Op.RESHAPE, P(Op.BROADCAST, where=lambda b: _operand(b).shape.rank == 0)))
def reshape_scalar_broadcast(instr):
    """reshape(broadcast(scalar)) → broadcast(scalar) of the new shape."""
    return new(Op.BROADCAST, instr.shape, [_operand(_operand(instr))], dimensions=())


# ---- transpose -------------------------------------------------------------------------------
@rule(P(Op.TRANSPOSE, where=lambda i: i.dimensions == tuple(range(i.shape.rank))))
def transpose_identity(instr):
    """transpose(x, {0, 1, ..., n-1}) → x."""
    return _operand(instr)


@rule(P(Op.TRANSPOSE, P(Op.TRANSPOSE)))
def transpose_transpose(instr):
    """transpose(transpose(x, p), q) → transpose(x, p∘q): output dim i reads x dim p[q[i]]."""
    inner = _operand(instr)
    perm = tuple(inner.dimensions[d] for d in instr.dimensions)
    return new(Op.TRANSPOSE, instr.shape, [_operand(inner)], dimensions=perm)


# ---- broadcast -------------------------------------------------------------------------------
@rule(P(Op.BROADCAST, where=lambda i: _operand(i).shape.dims == i.shape.dims
        and i.dimensions == tuple(range(i.shape.rank))))
def broadcast_identity(instr):
    """broadcast(x) → x when it adds no dimension."""
    return _operand(instr)


@rule(P(Op.BROADCAST, P(Op.BROADCAST)))
def broadcast_broadcast(instr):
    """broadcast(broadcast(x, d1), d2) → broadcast(x, d2∘d1): x dim i lands on d2[d1[i]]."""
    inner = _operand(instr)
    dims = tuple(instr.dimensions[d] for d in inner.dimensions)
    return new(Op.BROADCAST, instr.shape, [_operand(inner)], dimensions=dims)


# ---- slice -----------------------------------------------------------------------------------
def _full_slice(instr) -> bool:
    x = _operand(instr)
    return all(s.start == 0 and s.limit == d and (s.stride == 1 or d <= 1)
               for s, d in zip(instr.attrs.slice, x.shape.dims, strict=True))


@rule(P(Op.SLICE, where=_full_slice))
def slice_full(instr):
    """slice(x) covering all of x → x."""
    return _operand(instr)


@rule(P(Op.SLICE, P(Op.SLICE)))
def slice_slice(instr):
    """slice(slice(x)) → slice(x): the composed start is s1 + s2*t1 and the stride t1*t2."""
    inner = _operand(instr)
    dims = []
    for outer, first, n in zip(instr.attrs.slice, inner.attrs.slice, instr.shape.dims, strict=True):
        start = first.start + outer.start * first.stride
        stride = first.stride * outer.stride
        limit = start + (n - 1) * stride + 1 if n > 0 else start
        dims.append(SliceDim(start, limit, stride))
    return new(Op.SLICE, instr.shape, [_operand(inner)], slice=tuple(dims))


@rule(P(Op.SLICE, P(Op.CONCATENATE)))
def slice_concatenate(instr):
    """slice(concatenate(a, b, ...)) → slice(b) when the slice reads from one operand only."""
    concat = _operand(instr)
    d = concat.dimensions[0]
    sd = instr.attrs.slice[d]
    n = instr.shape.dims[d]
    if n == 0:
        return None
    last = sd.start + (n - 1) * sd.stride
    offset = 0
    for part in concat.operands:
        size = part.shape.dims[d]
        if offset <= sd.start and last < offset + size:
            dims = list(instr.attrs.slice)
            start = sd.start - offset
            dims[d] = SliceDim(start, start + (n - 1) * sd.stride + 1, sd.stride)
            return new(Op.SLICE, instr.shape, [part], slice=tuple(dims))
        offset += size
    return None


# ---- concatenate -----------------------------------------------------------------------------
@rule(P(Op.CONCATENATE, where=lambda i: len(i.operands) == 1))
def concatenate_single(instr):
    """concatenate(x) → x."""
    return _operand(instr)


@rule(P(Op.CONCATENATE))
def concatenate_drop_empty(instr):
    """concatenate(a, <empty>, b) → concatenate(a, b)."""
    d = instr.dimensions[0]
    kept = [op for op in instr.operands if op.shape.dims[d] != 0]
    if len(kept) == len(instr.operands) or not kept:
        return None
    return new(Op.CONCATENATE, instr.shape, kept, dimensions=instr.dimensions)


def _adjacent(a, b, d: int) -> bool:
    """a and b are unit-stride slices of one operand and b starts where a ends along d."""
    if a.opcode != Op.SLICE or b.opcode != Op.SLICE or _operand(a) is not _operand(b):
        return False
    for i, (sa, sb) in enumerate(zip(a.attrs.slice, b.attrs.slice, strict=True)):
        if sa.stride != 1 or sb.stride != 1:
            return False
        if i != d and sa != sb:
            return False
    return a.attrs.slice[d].limit == b.attrs.slice[d].start


def _merge(a, b, d: int, instr):
    dims = list(a.attrs.slice)
    dims[d] = SliceDim(a.attrs.slice[d].start, b.attrs.slice[d].limit, 1)
    shape_dims = list(a.shape.dims)
    shape_dims[d] += b.shape.dims[d]
    return new(Op.SLICE, instr.shape.with_dims(shape_dims), [_operand(a)], slice=tuple(dims))


@rule(P(Op.CONCATENATE, where=lambda i: len(i.operands) > 1))
def concatenate_adjacent_slices(instr):
    """concatenate(x[a:b], x[b:c]) → x[a:c] along the concatenated dimension."""
    d = instr.dimensions[0]
    parts = [instr.operands[0]]
    for op in instr.operands[1:]:
        if _adjacent(parts[-1], op, d):
            parts[-1] = _merge(parts[-1], op, d, instr)
        else:
            parts.append(op)
    if len(parts) == len(instr.operands):
        return None
    if len(parts) == 1:
        return new(Op.SLICE, instr.shape, parts[0].operands, slice=parts[0].attrs.slice)
    return new(Op.CONCATENATE, instr.shape, parts, dimensions=instr.dimensions)


# ---- pad, reverse, copy, iota ----------------------------------------------------------------
@rule(P(Op.PAD, where=lambda i: all(p.low == 0 and p.high == 0 and p.interior == 0
                                   for p in i.attrs.padding)))
def pad_noop(instr):
    """pad(x, v) with no padding anywhere → x."""
    return _operand(instr)


@rule(P(Op.REVERSE, where=lambda i: all(i.shape.dims[d] <= 1 for d in i.dimensions)))
def reverse_noop(instr):
    """reverse(x) over no dimension (or only size-1 ones) → x."""
    return _operand(instr)


@rule(P(Op.REVERSE, P(Op.REVERSE)))
def reverse_reverse(instr):
    """reverse(reverse(x, d1), d2) → reverse(x, d1 xor d2) (→ x when equal)."""
    inner = _operand(instr)
    dims = tuple(sorted(set(inner.dimensions) ^ set(instr.dimensions)))
    if not dims:
        return _operand(inner)
    return new(Op.REVERSE, instr.shape, [_operand(inner)], dimensions=dims)


@rule(P(Op.COPY, where=lambda i: _operand(i).shape == i.shape))
def copy_same_layout(instr):
    """copy(x) → x when the layout does not change (copy insertion adds needed ones later)."""
    return _operand(instr)


@rule(P(Op.IOTA, where=lambda i: i.shape.dims[i.dimensions[0]] == 1 and i.shape.num_elements > 0))
def iota_unit_dimension(instr):
    """iota along a dimension of size 1 → zeros."""
    return splat(0, instr.shape)
