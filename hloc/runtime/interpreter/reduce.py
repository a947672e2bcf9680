"""Reductions: reduce, reduce-window, select-and-scatter; plus the scalar-computation helpers.

Reducer computations are scalar HLO computations. Calling them once per element through the
interpreter would be far too slow, so `apply_scalar` "lifts" them: a computation built only from
elementwise ops evaluates unchanged on whole arrays (each op maps elementwise), so one call
handles every element at once. Computations that are a single binary op of the two parameters
(`add(p0, p1)`) map straight onto a numpy ufunc (`simple_ufunc`).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...ir import Computation, Opcode
from ...ir.computation import scalar_binary_root
from ...ir.opcodes import ELEMENTWISE
from .elementwise import float_max, float_min
from .registry import impl

# ---- scalar computations ---------------------------------------------------------------------

_UFUNCS = {
    Opcode.ADD: np.add, Opcode.MULTIPLY: np.multiply, Opcode.MAXIMUM: np.maximum,
    Opcode.MINIMUM: np.minimum, Opcode.AND: np.bitwise_and, Opcode.OR: np.bitwise_or,
    Opcode.XOR: np.bitwise_xor,
}
_LIFTABLE_STRUCTURAL = frozenset({Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE,
                                  Opcode.GET_TUPLE_ELEMENT, Opcode.BITCAST, Opcode.CALL})
_RNG_LIKE = frozenset({Opcode.MAP, Opcode.STOCHASTIC_CONVERT})


def simple_ufunc(comp: Computation):
    """The numpy ufunc if `comp` is exactly `op(p0, p1)` for a commutative binary op, else None."""
    root = scalar_binary_root(comp)
    return _UFUNCS.get(root.opcode) if root is not None else None


def returns_second_half(comp: Computation) -> bool:
    """True if `comp(a..., b...)` just returns b (scatter's "replace" combiner)."""
    root = comp.root
    n = comp.num_parameters // 2
    params = comp.parameters
    if root.opcode == Opcode.PARAMETER:
        return n == 1 and root is params[1]
    if root.opcode != Opcode.TUPLE or len(root.operands) != n:
        return False
    return all(o is params[n + i] for i, o in enumerate(root.operands))


def is_liftable(comp: Computation, _depth: int = 0) -> bool:
    """True if every instruction maps elementwise, so the computation runs on whole arrays."""
    for instr in comp.instructions:
        op = instr.opcode
        if op in _RNG_LIKE or (op not in ELEMENTWISE and op not in _LIFTABLE_STRUCTURAL):
            return False
        if any(s.dims for _, s in instr.shape.leaves()):
            return False
        if op == Opcode.CALL and (_depth > 8 or not is_liftable(instr.called[0], _depth + 1)):
            return False
    return True


def _leaf_dtypes(comp: Computation) -> list[np.dtype]:
    return [s.np_dtype for _, s in comp.root.shape.leaves()]


def apply_scalar(ctx, comp: Computation, args: list[np.ndarray], liftable: bool | None = None):
    """Apply a scalar computation elementwise to same-shape arrays; returns a list of arrays."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args)) if args else ()
    dtypes = _leaf_dtypes(comp)
    if liftable is None:
        liftable = is_liftable(comp)
    if liftable:
        with np.errstate(all="ignore"):
            out = ctx.call(comp, [np.asarray(a) for a in args])
        outs = list(out) if isinstance(out, tuple) else [out]
        return [np.broadcast_to(np.asarray(o).astype(dt, copy=False), shape)
                for o, dt in zip(outs, dtypes, strict=True)]
    return _apply_scalar_loop(ctx, comp, [np.broadcast_to(a, shape) for a in args], shape, dtypes)


def _apply_scalar_loop(ctx, comp, args, shape, dtypes):
    # Fallback for computations that are not purely elementwise: one call per element.
    results = [np.empty(shape, dt) for dt in dtypes]
    for pos in np.ndindex(*shape):
        out = ctx.call(comp, [np.asarray(a[pos]) for a in args])
        outs = out if isinstance(out, tuple) else (out,)
        for r, o in zip(results, outs, strict=True):
            r[pos] = o
    return results


def signed_zero_exact(ufunc, dtype: np.dtype) -> bool:
    """False where numpy's ufunc disagrees with XLA: float max/min order -0 < +0, numpy does not."""
    return ufunc not in (np.maximum, np.minimum) or dtype.kind not in "fV"


def binary_fn(ufunc, dtype: np.dtype):
    """The elementwise function to fold with: the ufunc, or XLA's float max/min."""
    if signed_zero_exact(ufunc, dtype):
        return ufunc
    return float_max if ufunc is np.maximum else float_min


def compute_dtype(dtype: np.dtype) -> np.dtype | None:
    """The dtype a fast-path ufunc reduction runs in, or None for the general path: narrow
    floats (f16, bf16, f8) take the general path, which rounds the accumulator to the narrow
    type after every step, as XLA CPU does (its reducers compute in the element type)."""
    if dtype.kind in "biuc" or (dtype.kind == "f" and dtype.itemsize >= 4):
        return dtype
    return None


# ---- reduce ----------------------------------------------------------------------------------

_SEQUENTIAL_LIMIT = 64  # longer reductions combine pairwise to bound the number of calls
_IN_ORDER_LIMIT = 4096  # the most numpy calls an in-order float sum may take


@impl(Opcode.REDUCE)
def reduce_(ctx, instr, ops):
    n = len(ops) // 2
    arrays, inits = ops[:n], ops[n:]
    dims = tuple(instr.dimensions)
    comp = instr.called[0]
    ufunc = simple_ufunc(comp) if n == 1 else None
    cdt = compute_dtype(arrays[0].dtype) if ufunc is not None else None
    if cdt is not None:
        x = arrays[0].astype(cdt, copy=False)
        init = inits[0].astype(cdt)[()]
        with np.errstate(all="ignore"):
            if _in_order(ufunc, x, dims):
                out = _sequential(ufunc, x, init, dims)
            else:
                out = np.asarray(ufunc.reduce(x, axis=dims, initial=init))
        if not signed_zero_exact(ufunc, cdt):
            out = _fix_zero_signs(ufunc, x, init, dims, out)
        return out.astype(arrays[0].dtype)
    kept = [d for d in range(arrays[0].ndim) if d not in dims]
    out_shape = tuple(arrays[0].shape[d] for d in kept)
    flat = [np.transpose(a, kept + list(dims)).reshape(math.prod(out_shape), -1)
            if a.size else np.zeros((math.prod(out_shape), 0), a.dtype) for a in arrays]
    results = fold_columns(ctx, comp, flat, inits)
    results = [r.reshape(out_shape) for r in results]
    return tuple(results) if instr.shape.is_tuple else results[0]


def _in_order(ufunc, x: np.ndarray, dims) -> bool:
    """Float sums and products over dimensions of at most 32 (what XLA CPU's tree rewrite
    leaves as loops) combine left to right, as those loops do; numpy's reduce sums pairwise,
    which longer ones keep (their order is XLA's reduction library's own)."""
    if ufunc not in (np.add, np.multiply) or x.dtype.kind not in "fc":
        return False
    count = math.prod(x.shape[d] for d in dims)
    return 1 < count <= _IN_ORDER_LIMIT and all(x.shape[d] <= 32 for d in dims)


def _sequential(ufunc, x: np.ndarray, init, dims) -> np.ndarray:
    """init (op) x[0] (op) x[1] ... over the reduced dimensions in row-major order."""
    kept = [d for d in range(x.ndim) if d not in dims]
    rows = np.transpose(x, sorted(dims) + kept).reshape(-1, *[x.shape[d] for d in kept])
    acc = np.full(rows.shape[1:], init, x.dtype)
    for row in rows:
        acc = ufunc(acc, row)
    return acc


def _fix_zero_signs(ufunc, x, init, dims, out):
    # A zero max is +0 if any +0 took part (a zero min is -0 if any -0 did).
    want_negative = ufunc is np.minimum
    hits = ((x == 0) & (np.signbit(x) == want_negative)).any(axis=dims)
    hits |= bool(init == 0 and np.signbit(init) == want_negative)
    zero = np.where(want_negative, -0.0, 0.0).astype(out.dtype)
    return np.where((out == 0) & hits, zero, out)


def fold_columns(ctx, comp, columns: list[np.ndarray], inits: list[np.ndarray]):
    """Reduce each row of the (M, R) arrays to one value, starting from the init values."""
    rows, count = columns[0].shape
    liftable = is_liftable(comp)
    acc = [np.broadcast_to(i, (rows,)) for i in inits]
    if count <= _SEQUENTIAL_LIMIT:
        for r in range(count):
            acc = apply_scalar(ctx, comp, acc + [c[:, r] for c in columns], liftable)
        return [np.array(a) for a in acc]
    # Combine neighbours pairwise: the order of elements is kept, so an associative reducer
    # gives the sequential result even when it is not commutative.
    vals = columns
    while vals[0].shape[1] > 1:
        pairs = vals[0].shape[1] // 2 * 2
        combined = apply_scalar(ctx, comp, [v[:, 0:pairs:2] for v in vals]
                                + [v[:, 1:pairs:2] for v in vals], liftable)
        vals = [np.concatenate([c, v[:, pairs:]], axis=1) for c, v in zip(combined, vals, strict=True)]
    return [np.array(a) for a in apply_scalar(ctx, comp, acc + [v[:, 0] for v in vals], liftable)]


# ---- windows ---------------------------------------------------------------------------------

def dilate_and_pad(x: np.ndarray, window, fill) -> tuple[np.ndarray, np.ndarray]:
    """The base-dilated, padded operand and a mask of the positions holding real elements."""
    dims = window.dims
    shape = []
    for size, w in zip(x.shape, dims, strict=True):
        dilated = (size - 1) * w.base_dilation + 1 if size else 0
        shape.append(max(0, w.padding_low) + dilated + max(0, w.padding_high))
    out = np.full(shape, fill, x.dtype)
    mask = np.zeros(shape, bool)
    region = tuple(slice(max(0, w.padding_low), max(0, w.padding_low) + (s - 1) * w.base_dilation + 1
                         if s else max(0, w.padding_low), w.base_dilation)
                   for s, w in zip(x.shape, dims, strict=False))
    out[region] = x
    mask[region] = True
    # Negative padding crops.
    crop = tuple(slice(max(0, -w.padding_low), n - max(0, -w.padding_high)) for n, w in zip(shape, dims, strict=False))
    return out[crop], mask[crop]


def window_views(x: np.ndarray, window, out_shape) -> np.ndarray:
    """A view of shape out_shape + window sizes: every (strided, dilated) window of x."""
    dims = window.dims
    spans = [(w.size - 1) * w.window_dilation + 1 for w in dims]
    if any(n < s for n, s in zip(x.shape, spans, strict=False)) or 0 in out_shape:
        return np.zeros(tuple(out_shape) + tuple(w.size for w in dims), x.dtype)
    view = np.lib.stride_tricks.sliding_window_view(x, spans)
    rank = x.ndim
    sel = tuple(slice(None, None, w.stride) for w in dims) + tuple(
        slice(None, None, w.window_dilation) for w in dims)
    view = view[sel]
    return view[tuple(slice(0, n) for n in out_shape) + (slice(None),) * rank]


def _window_positions(window):
    return itertools.product(*(range(w.size) for w in window.dims))


@impl(Opcode.REDUCE_WINDOW)
def reduce_window(ctx, instr, ops):
    n = len(ops) // 2
    arrays, inits = ops[:n], ops[n:]
    window = instr.attrs.window
    out_shape = instr.shape.tuple_shapes[0].dims if instr.shape.is_tuple else instr.shape.dims
    comp = instr.called[0]
    padded = [dilate_and_pad(a, window, i) for a, i in zip(arrays, inits, strict=False)]
    views = [window_views(p, window, out_shape) for p, _ in padded]
    mask = window_views(padded[0][1], window, out_shape)
    all_valid = bool(mask.all())
    ufunc = simple_ufunc(comp) if n == 1 else None
    cdt = compute_dtype(arrays[0].dtype) if ufunc is not None else None
    if cdt is not None:
        out = _fold_window_ufunc(ufunc, views[0].astype(cdt), mask, all_valid, inits[0].astype(cdt), window)
        return out.astype(arrays[0].dtype)
    liftable = is_liftable(comp)
    acc = [np.broadcast_to(i, out_shape) for i in inits]
    for pos in _window_positions(window):
        idx = (Ellipsis,) + pos
        new = apply_scalar(ctx, comp, acc + [v[idx] for v in views], liftable)
        acc = new if all_valid else [np.where(mask[idx], nv, a) for nv, a in zip(new, acc, strict=False)]
    results = [np.array(a) for a in acc]
    return tuple(results) if instr.shape.is_tuple else results[0]


def _fold_window_ufunc(ufunc, view, mask, all_valid, init, window):
    # Window elements in row-major order, as XLA's loop visits them; padding is skipped.
    acc = np.broadcast_to(init, view.shape[:view.ndim - len(window.dims)])
    fn = binary_fn(ufunc, view.dtype)
    with np.errstate(all="ignore"):
        for pos in _window_positions(window):
            idx = (Ellipsis,) + pos
            new = fn(acc, view[idx])
            acc = new if all_valid else np.where(mask[idx], new, acc)
    return np.array(acc)


@impl(Opcode.SELECT_AND_SCATTER)
def select_and_scatter(ctx, instr, ops):
    from .gather_scatter import accumulate

    operand, source, init = ops
    window = instr.attrs.window
    select, scatter = instr.called
    padded, mask = dilate_and_pad(operand, window, np.zeros((), operand.dtype))
    flat_pos = _original_positions(operand.shape, window, padded.shape)
    views = window_views(padded, window, source.shape)
    masks = window_views(mask, window, source.shape)
    pos_views = window_views(flat_pos, window, source.shape)
    liftable = is_liftable(select)
    best = np.zeros(source.shape, operand.dtype)
    best_pos = np.full(source.shape, -1, np.int64)
    for pos in _window_positions(window):
        idx = (Ellipsis,) + pos
        x, valid = views[idx], masks[idx]
        keep = apply_scalar(ctx, select, [best, x], liftable)[0].astype(bool)
        take = valid & ((best_pos < 0) | ~keep)
        best = np.where(take, x, best)
        best_pos = np.where(take, pos_views[idx], best_pos)
    result = np.array(np.broadcast_to(init, operand.shape)).reshape(-1)
    chosen = best_pos.reshape(-1)
    has = chosen >= 0
    accumulate(ctx, scatter, [result], chosen[has], [source.reshape(-1)[has]])
    return result.reshape(operand.shape)


def _original_positions(shape, window, padded_shape) -> np.ndarray:
    """For each padded position, the flat index of the operand element there (or -1)."""
    linear = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    padded, _ = dilate_and_pad(linear, window, -1)
    assert padded.shape == tuple(padded_shape)
    return padded
