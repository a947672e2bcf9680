"""Data-movement opcodes: broadcast, reshape, transpose, slices, concatenate, pad, reverse, iota,
copy, bitcast, get-dimension-size."""

from __future__ import annotations

import numpy as np

from ...ir import Opcode, Shape
from .gather_scatter import as_int64
from .registry import impl


@impl(Opcode.BROADCAST)
def broadcast(ctx, instr, ops):
    (x,) = ops
    dims = list(instr.dimensions)
    # Put the operand's dims in increasing target order, then insert the new dims as size 1.
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order)
    shape = [1] * instr.shape.rank
    for i in order:
        shape[dims[i]] = ops[0].shape[i]
    return np.broadcast_to(x.reshape(shape), instr.shape.dims)


@impl(Opcode.RESHAPE)
def reshape(ctx, instr, ops):
    return np.reshape(ops[0], instr.shape.dims)


@impl(Opcode.TRANSPOSE)
def transpose(ctx, instr, ops):
    return np.transpose(ops[0], instr.dimensions)


@impl(Opcode.SLICE)
def slice_(ctx, instr, ops):
    return ops[0][tuple(slice(s.start, s.limit, s.stride) for s in instr.attrs.slice)]


def clamped_starts(starts, operand_shape, sizes) -> list[int]:
    """Dynamic start indices clamped so the window [start, start+size) stays in bounds."""
    out = []
    for s, dim, size in zip(starts, operand_shape, sizes, strict=True):
        out.append(int(np.clip(as_int64(s), 0, dim - size)))
    return out


@impl(Opcode.DYNAMIC_SLICE)
def dynamic_slice(ctx, instr, ops):
    x = ops[0]
    sizes = instr.attrs.dynamic_slice_sizes
    starts = clamped_starts(ops[1:], x.shape, sizes)
    return x[tuple(slice(s, s + n) for s, n in zip(starts, sizes, strict=False))]


@impl(Opcode.DYNAMIC_UPDATE_SLICE)
def dynamic_update_slice(ctx, instr, ops):
    x, update = ops[0], ops[1]
    starts = clamped_starts(ops[2:], x.shape, update.shape)
    out = np.array(x)
    out[tuple(slice(s, s + n) for s, n in zip(starts, update.shape, strict=False))] = update
    return out


@impl(Opcode.CONCATENATE)
def concatenate(ctx, instr, ops):
    return np.concatenate(ops, axis=instr.dimensions[0])


@impl(Opcode.PAD)
def pad(ctx, instr, ops):
    x, value = ops
    cfg = instr.attrs.padding
    # Pad with the non-negative parts first, then crop what negative padding removes.
    shape = []
    for n, p in zip(x.shape, cfg, strict=True):
        inner = n + max(0, n - 1) * p.interior
        shape.append(max(0, p.low) + inner + max(0, p.high))
    out = np.full(shape, value, x.dtype)
    region = tuple(slice(max(0, p.low), max(0, p.low) + n + max(0, n - 1) * p.interior, p.interior + 1)
                   for n, p in zip(x.shape, cfg, strict=False))
    out[region] = x
    crop = tuple(slice(max(0, -p.low), n - max(0, -p.high)) for n, p in zip(shape, cfg, strict=False))
    return out[crop]


@impl(Opcode.REVERSE)
def reverse(ctx, instr, ops):
    return np.flip(ops[0], axis=tuple(instr.dimensions)) if instr.dimensions else ops[0]


@impl(Opcode.IOTA)
def iota(ctx, instr, ops):
    dims = instr.shape.dims
    axis = instr.dimensions[0]
    line = np.arange(dims[axis], dtype=np.int64)
    if instr.shape.dtype.is_float or instr.shape.dtype.is_complex:
        line = line.astype(np.float64)
    values = line.astype(instr.shape.np_dtype)
    shape = [1] * len(dims)
    shape[axis] = dims[axis]
    return np.broadcast_to(values.reshape(shape), dims)


@impl(Opcode.COPY)
def copy(ctx, instr, ops):
    return ops[0]


@impl(Opcode.GET_DIMENSION_SIZE)
def get_dimension_size(ctx, instr, ops):
    return np.asarray(ops[0].shape[instr.dimensions[0]], instr.shape.np_dtype)


# ---- bitcast ---------------------------------------------------------------------------------

def _major_to_minor(shape: Shape) -> list[int]:
    if shape.layout is None or len(shape.layout.minor_to_major) != shape.rank:
        return list(range(shape.rank))
    return list(reversed(shape.layout.minor_to_major))


def to_physical(x: np.ndarray, shape: Shape) -> np.ndarray:
    """The array's elements in memory order for `shape`'s layout (a flat array)."""
    return np.ascontiguousarray(np.transpose(x, _major_to_minor(shape))).reshape(-1)


def from_physical(flat: np.ndarray, shape: Shape) -> np.ndarray:
    """Inverse of to_physical: a logical array from elements in `shape`'s memory order."""
    order = _major_to_minor(shape)
    physical = flat.reshape([shape.dims[d] for d in order])
    return np.transpose(physical, np.argsort(order))


@impl(Opcode.BITCAST)
def bitcast(ctx, instr, ops):
    (x,) = ops
    src, dst = instr.operands[0].shape, instr.shape
    if src.rank == 0 and dst.rank == 0:
        # Also the lifted (elementwise) use in scalar computations: x may be any shape.
        return _reinterpret(np.asarray(x), dst.np_dtype)
    flat = _reinterpret(to_physical(x, src), dst.np_dtype)
    return from_physical(flat, dst)


def _reinterpret(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if x.dtype == dtype:
        return x
    if x.dtype.itemsize == dtype.itemsize:
        return np.array(x, order="C").view(dtype)  # (ascontiguousarray would make 0-d 1-d)
    # Width-changing bitcasts reshape the minor dimension; only whole buffers are equivalent.
    return np.ascontiguousarray(x).reshape(-1).view(dtype)
