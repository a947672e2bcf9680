"""gather and scatter with full dimension numbers (including batching dims), vectorized.

Both ops are computed by building, for every operand dimension, an integer index array over the
(batch..., window...) iteration space and using numpy advanced indexing. Gather clamps each start
index so the whole slice is in bounds; scatter skips every update window that is not fully in
bounds (what XLA's CPU and GPU backends do). Scatter applies its update computation in the order
of the scatter indices, so duplicate indices combine exactly as a sequential loop would.
"""

from __future__ import annotations

import numpy as np

from ...ir import Opcode
from .reduce import apply_scalar, is_liftable, returns_second_half, signed_zero_exact, simple_ufunc
from .registry import impl

_INT64_MAX = np.iinfo(np.int64).max


def as_int64(x: np.ndarray) -> np.ndarray:
    """Indices as int64; huge unsigned values saturate instead of wrapping negative."""
    x = np.asarray(x)
    if x.dtype.kind == "u" and x.dtype.itemsize == 8:
        x = np.minimum(x, np.uint64(_INT64_MAX))
    return x.astype(np.int64)


def index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """The index array as (batch..., K) int64, the index vector moved last."""
    if index_vector_dim == indices.ndim:
        return as_int64(indices)[..., None]
    return np.moveaxis(as_int64(indices), index_vector_dim, -1)


def _batch_axis(indices_dim: int, index_vector_dim: int) -> int:
    # Position of an indices dimension among the batch dims (the index vector dim removed).
    return indices_dim if indices_dim < index_vector_dim else indices_dim - 1


def _starts(rank, idx, index_map, op_batch_dims, idx_batch_dims, index_vector_dim):
    """Per operand dim: the start index over the batch shape (an int64 array, or 0)."""
    batch_shape = idx.shape[:-1]
    starts: list = [0] * rank
    for k, d in enumerate(index_map):
        starts[d] = idx[..., k]
    for d, idim in zip(op_batch_dims, idx_batch_dims, strict=True):
        axis = _batch_axis(idim, index_vector_dim)
        shape = [1] * len(batch_shape)
        shape[axis] = batch_shape[axis]
        starts[d] = np.arange(batch_shape[axis], dtype=np.int64).reshape(shape)
    return starts


def _full_indices(starts, window_dims, window_sizes, batch_shape):
    """Operand index arrays over batch_shape + window_sizes (start + window offset)."""
    full = tuple(batch_shape) + tuple(window_sizes)
    nw = len(window_dims)
    out = []
    for d, start in enumerate(starts):
        ix = np.asarray(start, np.int64).reshape(np.shape(start) + (1,) * nw)
        if d in window_dims:
            j = window_dims.index(d)
            shape = (1,) * len(batch_shape) + (1,) * j + (window_sizes[j],) + (1,) * (nw - j - 1)
            ix = ix + np.arange(window_sizes[j], dtype=np.int64).reshape(shape)
        out.append(np.broadcast_to(ix, full))
    return out


@impl(Opcode.GATHER)
def gather(ctx, instr, ops):
    operand, indices = ops
    dn = instr.attrs.gather_dnums
    sizes = instr.attrs.gather_slice_sizes
    idx = index_vectors(indices, dn.index_vector_dim)
    starts = _starts(operand.ndim, idx, dn.start_index_map, dn.operand_batching_dims,
                     dn.start_indices_batching_dims, dn.index_vector_dim)
    for d in dn.start_index_map:
        starts[d] = np.clip(starts[d], 0, operand.shape[d] - sizes[d])
    window_dims = [d for d in range(operand.ndim)
                   if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    batch_shape = idx.shape[:-1]
    index = _full_indices(starts, window_dims, [sizes[d] for d in window_dims], batch_shape)
    result = operand[tuple(index)] if operand.ndim else np.broadcast_to(operand, batch_shape)
    nb = len(batch_shape)
    offset = list(dn.offset_dims)
    batch_iter = iter(range(nb))
    order = [nb + offset.index(p) if p in offset else next(batch_iter) for p in range(result.ndim)]
    return np.ascontiguousarray(np.transpose(result, order))


@impl(Opcode.SCATTER)
def scatter(ctx, instr, ops):
    n = (len(ops) - 1) // 2
    operands, indices, updates = ops[:n], ops[n], ops[n + 1:]
    dn = instr.attrs.scatter_dnums
    rank = operands[0].ndim
    idx = index_vectors(indices, dn.index_vector_dim)
    batch_shape = idx.shape[:-1]
    update_window = list(dn.update_window_dims)
    perm = [d for d in range(updates[0].ndim) if d not in update_window] + update_window
    ups = [np.transpose(u, perm) for u in updates]
    window_sizes = [updates[0].shape[d] for d in update_window]
    window_dims = [d for d in range(rank)
                   if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
    starts = _starts(rank, idx, dn.scatter_dims_to_operand_dims, dn.input_batching_dims,
                     dn.scatter_indices_batching_dims, dn.index_vector_dim)
    valid = np.ones(batch_shape, bool)
    for d, start in enumerate(starts):
        extent = window_sizes[window_dims.index(d)] if d in window_dims else 1
        valid &= (np.asarray(start) >= 0) & (np.asarray(start) + extent <= operands[0].shape[d])
    index = _full_indices(starts, window_dims, window_sizes, batch_shape)
    full = tuple(batch_shape) + tuple(window_sizes)
    keep = np.broadcast_to(valid.reshape(valid.shape + (1,) * len(window_sizes)), full).reshape(-1)
    results = [np.array(o).reshape(-1) for o in operands]
    if keep.any():
        flat = np.ravel_multi_index(tuple(i.reshape(-1)[keep] for i in index), operands[0].shape) \
            if rank else np.zeros(int(keep.sum()), np.int64)
        accumulate(ctx, instr.called[0], results, flat, [u.reshape(-1)[keep] for u in ups])
    results = [r.reshape(o.shape) for r, o in zip(results, operands, strict=False)]
    return tuple(results) if instr.shape.is_tuple else results[0]


def occurrence_rank(flat: np.ndarray) -> np.ndarray:
    """For each position, how many earlier positions hold the same index (0 for the first)."""
    order = np.argsort(flat, kind="stable")
    ordered = flat[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(flat)), 0))
    rank = np.empty(len(flat), np.int64)
    rank[order] = np.arange(len(flat)) - group_start
    return rank


def accumulate(ctx, comp, targets: list[np.ndarray], flat: np.ndarray, values: list[np.ndarray]):
    """targets[flat[i]] = comp(targets[flat[i]], values[i]) for i in order, in place (1-D)."""
    if len(flat) == 0:
        return
    ufunc = simple_ufunc(comp) if len(targets) == 1 else None
    if ufunc is not None and targets[0].dtype.kind in "biufc" and signed_zero_exact(ufunc, targets[0].dtype):
        with np.errstate(all="ignore"):
            ufunc.at(targets[0], flat, values[0])
        return
    if returns_second_half(comp):
        # Replace: the last update of each position wins.
        last = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
        for t, v in zip(targets, values, strict=False):
            t[flat[last]] = v[last]
        return
    # Updates of one round hit distinct positions, so each round is one vectorized call.
    rank = occurrence_rank(flat)
    liftable = is_liftable(comp)
    for r in range(int(rank.max()) + 1):
        sel = rank == r
        where = flat[sel]
        new = apply_scalar(ctx, comp, [t[where] for t in targets] + [v[sel] for v in values], liftable)
        for t, nv in zip(targets, new, strict=False):
            t[where] = nv
