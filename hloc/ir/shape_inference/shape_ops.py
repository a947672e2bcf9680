"""Data-movement ops: broadcast, reshape, transpose, slices, concatenate, pad, reverse, bitcast."""

from __future__ import annotations

import math

from .. import dtypes
from ..opcodes import Opcode as O
from .common import (
    S32_SCALAR,
    P,
    arr,
    check_dims_valid,
    dims_attr,
    is_integral,
    is_permutation,
    join,
    one_dim_attr,
    operand,
    shape_text,
    type_name,
)
from .registry import fail, register


def _declared_array(instr):
    s = instr.shape
    if not s.is_array:
        raise fail(f"result must be an array, declared {shape_text(s)}")
    return s


@register(O.BROADCAST)
def broadcast(instr):
    """Result dims are the declared ones; `dimensions` maps operand dim i to result dim."""
    x, out = operand(instr, 0), _declared_array(instr)
    dims = dims_attr(instr)
    if len(dims) != x.rank:
        raise fail(f"dimensions {{{join(dims)}}} must have one entry per operand dimension "
                   f"(operand rank {x.rank})")
    check_dims_valid(dims, out.rank, "broadcast dimension")
    for i, d in enumerate(dims):
        if x.dims[i] != out.dims[d]:
            raise fail(f"operand dimension {i} has size {x.dims[i]} but result dimension {d} "
                       f"has size {out.dims[d]}")
    return arr(x.element_type, out.dims)


@register(O.RESHAPE)
def reshape(instr):
    x, out = operand(instr, 0), _declared_array(instr)
    if math.prod(x.dims) != math.prod(out.dims):
        raise fail(f"element counts differ: {shape_text(x)} has {math.prod(x.dims)}, "
                   f"{shape_text(out)} has {math.prod(out.dims)}")
    return arr(x.element_type, out.dims)


@register(O.DYNAMIC_RESHAPE, operands=(1, None))
def dynamic_reshape(instr):
    x, out = operand(instr, 0), _declared_array(instr)
    if len(instr.operands) != out.rank + 1:
        raise fail(f"needs one size operand per result dimension ({out.rank}), "
                   f"got {len(instr.operands) - 1}")
    for i in range(1, len(instr.operands)):
        s = operand(instr, i)
        if s.element_type != P.S32 or s.rank != 0:
            raise fail(f"size operand {i} must be s32[], got {shape_text(s)}")
    if math.prod(x.dims) != math.prod(out.dims):
        raise fail(f"element counts differ: {shape_text(x)} vs bound {shape_text(out)}")
    return arr(x.element_type, out.dims)


@register(O.TRANSPOSE)
def transpose(instr):
    x = operand(instr, 0)
    perm = dims_attr(instr)
    if not is_permutation(perm, x.rank):
        raise fail(f"dimensions {{{join(perm)}}} are not a permutation of the operand "
                   f"dimensions of {shape_text(x)}")
    return arr(x.element_type, (x.dims[p] for p in perm))


@register(O.BITCAST)
def bitcast(instr):
    """Reinterprets the bytes: any array shape of the same total bit size."""
    x, out = operand(instr, 0), _declared_array(instr)
    in_bits = math.prod(x.dims) * dtypes.info(x.element_type).bits
    out_bits = math.prod(out.dims) * dtypes.info(out.element_type).bits
    if in_bits != out_bits:
        raise fail(f"operand {shape_text(x)} and result {shape_text(out)} differ in size")
    return arr(out.element_type, out.dims)


@register(O.SLICE)
def slice_(instr):
    x = operand(instr, 0)
    sl = instr.attrs.slice or ()
    if len(sl) != x.rank:
        raise fail(f"needs one slice entry per operand dimension ({x.rank}), got {len(sl)}")
    sizes = []
    for i, s in enumerate(sl):
        if s.start < 0 or s.limit > x.dims[i] or s.start > s.limit:
            raise fail(f"dimension {i}: slice [{s.start}:{s.limit}] is outside [0:{x.dims[i]}] "
                       f"or reversed")
        if s.stride <= 0:
            raise fail(f"dimension {i}: stride {s.stride} must be positive")
        sizes.append((s.limit - s.start + s.stride - 1) // s.stride)
    return arr(x.element_type, sizes)


def _start_indices(instr, first: int, rank: int) -> None:
    """Dynamic-(update-)slice start indices: `rank` integral scalars of one type (or the legacy
    single rank-1 index vector)."""
    idx = [operand(instr, i, f"start index {i - first}") for i in range(first, len(instr.operands))]
    if len(idx) == 1 and idx[0].rank == 1:
        if idx[0].dims[0] != rank or not is_integral(idx[0]):
            raise fail(f"start index vector must be an integral [{rank}] array, "
                       f"got {shape_text(idx[0])}")
        return
    if len(idx) != rank:
        raise fail(f"needs one start index per operand dimension ({rank}), got {len(idx)}")
    for i, s in enumerate(idx):
        if s.rank != 0 or not is_integral(s):
            raise fail(f"start index {i} must be an integral scalar, got {shape_text(s)}")
        if s.element_type != idx[0].element_type:
            raise fail(f"start indices must share one type, got {type_name(idx[0])} and "
                       f"{type_name(s)}")


@register(O.DYNAMIC_SLICE, operands=(1, None))
def dynamic_slice(instr):
    x = operand(instr, 0)
    _start_indices(instr, 1, x.rank)
    sizes = instr.attrs.dynamic_slice_sizes or ()
    if len(sizes) != x.rank:
        raise fail(f"needs one slice size per operand dimension ({x.rank}), got {len(sizes)}")
    for i, (size, bound) in enumerate(zip(sizes, x.dims, strict=True)):
        if size < 0 or size > bound:
            raise fail(f"slice size {size} in dimension {i} is outside [0, {bound}]")
    return arr(x.element_type, sizes)


@register(O.DYNAMIC_UPDATE_SLICE, operands=(2, None))
def dynamic_update_slice(instr):
    x, upd = operand(instr, 0), operand(instr, 1, "update")
    _start_indices(instr, 2, x.rank)
    if upd.rank != x.rank:
        raise fail(f"update rank {upd.rank} differs from operand rank {x.rank}")
    if upd.element_type != x.element_type:
        raise fail(f"update element type {type_name(upd)} differs from operand's {type_name(x)}")
    for i, (u, bound) in enumerate(zip(upd.dims, x.dims, strict=True)):
        if u > bound:
            raise fail(f"update dimension {i} has size {u}, larger than the operand's {bound}")
    return arr(x.element_type, x.dims)


@register(O.CONCATENATE, operands=(1, None))
def concatenate(instr):
    first = operand(instr, 0)
    dim = one_dim_attr(instr, "concatenate dimension")
    if dim < 0 or dim >= first.rank:
        raise fail(f"dimension {dim} is out of range for rank {first.rank}")
    total = 0
    for i in range(len(instr.operands)):
        s = operand(instr, i)
        if s.element_type != first.element_type or s.rank != first.rank:
            raise fail(f"operand {i} {shape_text(s)} does not match operand 0 {shape_text(first)}")
        for d in range(s.rank):
            if d != dim and s.dims[d] != first.dims[d]:
                raise fail(f"operand {i} {shape_text(s)} differs from operand 0 "
                           f"{shape_text(first)} in dimension {d}")
        total += s.dims[dim]
    return arr(first.element_type, first.dims[:dim] + (total,) + first.dims[dim + 1:])


@register(O.PAD, operands=2)
def pad(instr):
    x, value = operand(instr, 0), operand(instr, 1, "padding value")
    if value.rank != 0:
        raise fail(f"padding value must be a scalar, got {shape_text(value)}")
    if value.element_type != x.element_type:
        raise fail(f"padding value type {type_name(value)} differs from operand's {type_name(x)}")
    cfg = instr.attrs.padding or ()
    if len(cfg) != x.rank:
        raise fail(f"needs one padding entry per operand dimension ({x.rank})")
    dims = []
    for i, (p, n) in enumerate(zip(cfg, x.dims, strict=True)):
        if p.interior < 0:
            raise fail(f"dimension {i}: interior padding {p.interior} must not be negative")
        size = n + p.low + p.high + max(n - 1, 0) * p.interior
        if size < 0:
            raise fail(f"dimension {i}: padding {p.low}_{p.high}_{p.interior} makes size {size}")
        dims.append(size)
    return arr(x.element_type, dims)


@register(O.REVERSE)
def reverse(instr):
    x = operand(instr, 0)
    check_dims_valid(dims_attr(instr), x.rank, "reverse dimension")
    return arr(x.element_type, x.dims)


@register(O.GET_DIMENSION_SIZE)
def get_dimension_size(instr):
    x = operand(instr, 0)
    check_dims_valid((one_dim_attr(instr, "dimension"),), x.rank, "dimension")
    return S32_SCALAR


@register(O.SET_DIMENSION_SIZE, operands=2)
def set_dimension_size(instr):
    x, size = operand(instr, 0), operand(instr, 1, "size")
    check_dims_valid((one_dim_attr(instr, "dimension"),), x.rank, "dimension")
    if size.element_type != P.S32 or size.rank != 0:
        raise fail(f"size must be s32[], got {shape_text(size)}")
    return arr(x.element_type, x.dims)
