"""Gather and (variadic) scatter, batching dimensions included (XLA/StableHLO semantics)."""

from __future__ import annotations

from ..opcodes import Opcode as O
from .common import (
    arr,
    check_dims_valid,
    is_integral,
    join,
    operand,
    shape_text,
    tup,
    type_name,
)
from .reductions import check_reducer
from .registry import fail, register


def _expanded_indices(idx, ivd: int, what: str) -> tuple[int, ...]:
    """Index dims with an implicit trailing 1 when index_vector_dim == rank."""
    if not is_integral(idx):
        raise fail(f"{what} must be integral, got {shape_text(idx)}")
    if ivd < 0 or ivd > idx.rank:
        raise fail(f"index_vector_dim {ivd} must be in [0, {idx.rank}]")
    return idx.dims + (1,) if ivd == idx.rank else idx.dims


def _disjoint(a, b, what_a: str, what_b: str) -> None:
    common = sorted(set(a) & set(b))
    if common:
        raise fail(f"{what_a} and {what_b} share dimension(s) {{{join(common)}}}")


def _check_index_map(index_map, n_index, x_rank, batching, what: str) -> None:
    if len(index_map) != n_index:
        raise fail(f"{what} has {len(index_map)} entries but the index vector has {n_index}")
    check_dims_valid(index_map, x_rank, what)
    _disjoint(index_map, batching, what, "operand batching dimensions")


def _check_batching(x, idx_dims, ivd, x_batch, idx_batch, names) -> None:
    """Operand batching dims pair up with index batching dims of equal size."""
    check_dims_valid(idx_batch, len(idx_dims), names[1])
    if ivd in idx_batch:
        raise fail(f"{names[1]} must not contain index_vector_dim {ivd}")
    if len(x_batch) != len(idx_batch):
        raise fail(f"{names[0]} and {names[1]} must have the same length")
    for a, b in zip(x_batch, idx_batch, strict=True):
        if x.dims[a] != idx_dims[b]:
            raise fail(f"operand batching dimension {a} (size {x.dims[a]}) and index batching "
                       f"dimension {b} (size {idx_dims[b]}) differ")


def _gather_dnums(instr, x, idx_dims):
    dn = instr.attrs.gather_dnums
    if dn is None:
        raise fail("missing gather dimension numbers")
    check_dims_valid(dn.collapsed_slice_dims, x.rank, "collapsed_slice_dims", sort=True)
    check_dims_valid(dn.operand_batching_dims, x.rank, "operand_batching_dims", sort=True)
    _disjoint(dn.collapsed_slice_dims, dn.operand_batching_dims, "collapsed_slice_dims",
              "operand_batching_dims")
    _check_index_map(dn.start_index_map, idx_dims[dn.index_vector_dim], x.rank,
                     dn.operand_batching_dims, "start_index_map")
    _check_batching(x, idx_dims, dn.index_vector_dim, dn.operand_batching_dims,
                    dn.start_indices_batching_dims,
                    ("operand_batching_dims", "start_indices_batching_dims"))
    return dn


def _gather_slice_sizes(instr, x, dn):
    sizes = instr.attrs.gather_slice_sizes or ()
    if len(sizes) != x.rank:
        raise fail(f"needs one slice size per operand dimension ({x.rank})")
    for i, (s, n) in enumerate(zip(sizes, x.dims, strict=True)):
        if s < 0 or s > n:
            raise fail(f"slice size {s} in dimension {i} is outside [0, {n}]")
    for d in dn.collapsed_slice_dims + dn.operand_batching_dims:
        if sizes[d] > 1:
            raise fail(f"collapsed or batching dimension {d} must have slice size <= 1, "
                       f"has {sizes[d]}")
    dropped = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    return [s for i, s in enumerate(sizes) if i not in dropped]


@register(O.GATHER, operands=2)
def gather(instr):
    x, idx = operand(instr, 0), operand(instr, 1, "start indices")
    dn = instr.attrs.gather_dnums
    if dn is None:
        raise fail("missing gather dimension numbers")
    idx_dims = _expanded_indices(idx, dn.index_vector_dim, "start indices")
    _gather_dnums(instr, x, idx_dims)
    offsets = _gather_slice_sizes(instr, x, dn)
    batch = [n for i, n in enumerate(idx_dims) if i != dn.index_vector_dim]
    out_rank = len(dn.offset_dims) + len(batch)
    check_dims_valid(dn.offset_dims, out_rank, "offset_dims", sort=True)
    if len(offsets) != len(dn.offset_dims):
        raise fail(f"offset_dims has {len(dn.offset_dims)} entries; collapsed_slice_dims and "
                   f"operand_batching_dims leave {len(offsets)} of the {x.rank} slice dimensions")
    offset_iter, batch_iter = iter(offsets), iter(batch)
    dims = [next(offset_iter) if i in dn.offset_dims else next(batch_iter) for i in range(out_rank)]
    return arr(x.element_type, dims)


def _scatter_dnums(instr, x, idx_dims, upd_rank):
    dn = instr.attrs.scatter_dnums
    check_dims_valid(dn.update_window_dims, upd_rank, "update_window_dims", sort=True)
    check_dims_valid(dn.inserted_window_dims, x.rank, "inserted_window_dims", sort=True)
    check_dims_valid(dn.input_batching_dims, x.rank, "input_batching_dims", sort=True)
    _disjoint(dn.inserted_window_dims, dn.input_batching_dims, "inserted_window_dims",
              "input_batching_dims")
    window = len(dn.update_window_dims) + len(dn.inserted_window_dims) + len(dn.input_batching_dims)
    if window != x.rank:
        raise fail(f"update_window_dims, inserted_window_dims and input_batching_dims cover "
                   f"{window} dimensions, the operand has {x.rank}")
    _check_index_map(dn.scatter_dims_to_operand_dims, idx_dims[dn.index_vector_dim], x.rank,
                     dn.input_batching_dims, "scatter_dims_to_operand_dims")
    _check_batching(x, idx_dims, dn.index_vector_dim, dn.input_batching_dims,
                    dn.scatter_indices_batching_dims,
                    ("input_batching_dims", "scatter_indices_batching_dims"))
    return dn


def _check_updates(x, upd, idx_dims, dn, i):
    expect_rank = len(idx_dims) - 1 + len(dn.update_window_dims)
    if upd.rank != expect_rank:
        raise fail(f"updates {i} must have rank {expect_rank}, got {shape_text(upd)}")
    dropped = set(dn.inserted_window_dims) | set(dn.input_batching_dims)
    bounds = [n for d, n in enumerate(x.dims) if d not in dropped]
    for w, bound in zip(dn.update_window_dims, bounds, strict=True):
        if upd.dims[w] > bound:
            raise fail(f"updates {i} window dimension {w} has size {upd.dims[w]}, larger than "
                       f"the operand's {bound}")
    scatter_sizes = [n for d, n in enumerate(idx_dims) if d != dn.index_vector_dim]
    upd_scatter = [n for d, n in enumerate(upd.dims) if d not in dn.update_window_dims]
    if upd_scatter != scatter_sizes:
        raise fail(f"updates {i} scatter dimensions [{join(upd_scatter)}] must equal the index "
                   f"batch dimensions [{join(scatter_sizes)}]")


@register(O.SCATTER, operands=(3, None), parity="odd", called=1)
def scatter(instr):
    n = len(instr.operands) // 2
    xs = [operand(instr, i) for i in range(n)]
    idx = operand(instr, n, "scatter indices")
    ups = [operand(instr, n + 1 + i, f"updates {i}") for i in range(n)]
    dn = instr.attrs.scatter_dnums
    if dn is None:
        raise fail("missing scatter dimension numbers")
    idx_dims = _expanded_indices(idx, dn.index_vector_dim, "scatter indices")
    for i, (x, upd) in enumerate(zip(xs, ups, strict=True)):
        if x.dims != xs[0].dims or upd.dims != ups[0].dims:
            raise fail(f"operand/updates {i} dimensions differ from operand/updates 0")
        _scatter_dnums(instr, x, idx_dims, upd.rank)
        _check_updates(x, upd, idx_dims, dn, i)
    inits = [arr(x.element_type, ()) for x in xs]
    accs = check_reducer(instr.called[0], inits, [u.element_type for u in ups],
                         "update computation")
    for i, (x, acc) in enumerate(zip(xs, accs, strict=True)):
        if acc.element_type != x.element_type:
            raise fail(f"update computation result {i} is {type_name(acc)}, operand {i} is "
                       f"{type_name(x)}")
    shapes = [arr(x.element_type, x.dims) for x in xs]
    return shapes[0] if n == 1 else tup(shapes)
