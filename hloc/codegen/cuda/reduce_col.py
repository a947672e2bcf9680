"""Column reductions: the contiguous input dimension is kept.

`column-reduce` uses 32x32 tiles: a block of 32x32 threads owns 32 consecutive output
columns (in input memory order, so the 32 lanes of a warp load 32 neighbouring elements).
Thread (x, y) combines rows y, y+32, ... of column x into a partial, writes it to a shared
tile at [y][x], and after a barrier reads [x][y]: warp y now holds the 32 partials of column
y, reduces them with shuffles, and lane 0 stores. The tile rows are padded to 33 entries so
the transposed reads hit distinct shared-memory banks.
"""

from __future__ import annotations

from .epilogue import find_core, store_with_core
from .kernel import KernelBuild, dims, variant
from .parts import Part, PlanContext
from .reduce_common import (
    PartialOps,
    ReduceShape,
    SharedPartials,
    accumulate_strided,
    shared_partial_bytes,
    split_index,
)

TILE = 32
PITCH = TILE + 1


def plan_column(pc: PlanContext, k: int, rs: ReduceShape) -> list[Part]:
    launch = dims((-(-rs.rows // TILE),), (TILE, TILE))
    return [Part("column-reduce", (k,), launch, shared_bytes=shared_partial_bytes(rs, TILE * PITCH),
                 block_threads=TILE * TILE)]


def _partial(kb: KernelBuild, ops: PartialOps, rs: ReduceShape, kept_index, live, y):
    return accumulate_strided(kb, ops, rs, dict(kept_index),
                              kb.b.select(live, y, kb.i64(rs.row_length)), TILE)


@variant("column-reduce")
def emit_column(kb: KernelBuild) -> None:
    (item,) = kb.items()
    rs = ReduceShape.of(find_core(item.instr))
    ops = PartialOps(kb, rs)
    b = kb.b
    x, y = kb.tid("x"), kb.tid("y")
    base = b.mul(kb.ctaid(), kb.i64(TILE))
    column = b.add(base, x)
    live = b.icmp_unsigned("<", column, kb.i64(rs.rows))
    kept = split_index(kb, b.select(live, column, kb.i64(0)), rs.in_shape, rs.kept_memory)
    p = _partial(kb, ops, rs, kept, live, y)
    tile = SharedPartials(kb, ops, TILE * PITCH)
    tile.store(b.add(b.mul(y, kb.i64(PITCH)), x), p)
    kb.nvvm.barrier()
    p = ops.warp_reduce(tile.load(b.add(b.mul(x, kb.i64(PITCH)), y)))
    mine = b.add(base, y)
    with b.if_then(b.and_(b.icmp_unsigned("==", x, kb.i64(0)),
                          b.icmp_unsigned("<", mine, kb.i64(rs.rows)))):
        index = split_index(kb, mine, rs.in_shape, rs.kept_memory)
        store_with_core(kb, item, rs.instr, [index[d] for d in rs.kept], ops.finish(p))
