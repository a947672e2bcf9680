"""Row reductions: the contiguous input dimension is reduced.

Two variants, both race-free (every partial is combined exactly once, in registers, through
warp shuffles or through shared memory after a barrier):
- `row-reduce.block`: one block of T threads per output element. Thread t combines elements
  t, t+T, ... of the row (coalesced loads), each warp reduces its 32 partials with shuffles,
  lane 0 of each warp puts its partial in shared memory, and after a barrier every warp
  reduces those (the redundant warps keep the shuffles block-uniform); thread 0 stores.
- `row-reduce.warp`: one warp per output element, T/32 rows per block, for short rows: lane
  l combines elements l, l+32, ...; shuffles; lane 0 stores.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Opcode
from .epilogue import find_core, store_with_core
from .kernel import KernelBuild, dims, variant
from .loop import physical_index
from .parts import Part, PlanContext, plans
from .reduce_common import (
    Partial,
    PartialOps,
    ReduceShape,
    SharedPartials,
    accumulate_strided,
    shared_partial_bytes,
)

WARP = 32
SHORT_ROW = 512  # rows up to this long get one warp each
MIN_REDUCED = 8  # shorter reductions stay in the loop kernel (one thread per output)


@plans(Opcode.REDUCE)
def plan_reduce(pc: PlanContext, k: int) -> list[Part] | None:
    from .reduce_col import plan_column

    rs = ReduceShape.of(find_core(pc.items[k].instr))
    if not rs.reduced or rs.row_length < MIN_REDUCED or rs.rows == 0:
        return None
    if not rs.minor_reduced:
        return plan_column(pc, k, rs)
    if rs.row_length <= SHORT_ROW and rs.rows > 1:
        per_block = 8
        launch = dims((-(-rs.rows // per_block),), (WARP * per_block,))
        return [Part("row-reduce.warp", (k,), launch, (("rows_per_block", per_block),))]
    threads = 1024 if rs.rows < 64 else 256
    launch = dims((rs.rows,), (threads,))
    return [Part("row-reduce.block", (k,), launch,
                 shared_bytes=shared_partial_bytes(rs, threads // WARP))]


def _accumulate(kb: KernelBuild, ops: PartialOps, rs: ReduceShape, out_index, start, step):
    """The partial of row `out_index` over reduced positions start, start+step, ..."""
    return accumulate_strided(kb, ops, rs, dict(zip(rs.kept, out_index, strict=True)), start,
                              step)


def _store(kb: KernelBuild, ops: PartialOps, item, out_index, p: Partial) -> None:
    store_with_core(kb, item, ops.rs.instr, out_index, ops.finish(p))


def _row_index(kb: KernelBuild, item, row: ir.Value) -> list[ir.Value]:
    out_shape = kb.output_shapes[item.outputs[0]]
    return physical_index(kb, out_shape, row)


@variant("row-reduce.block")
def emit_block(kb: KernelBuild) -> None:
    (item,) = kb.items()
    rs = ReduceShape.of(find_core(item.instr))
    ops = PartialOps(kb, rs)
    b = kb.b
    threads = kb.recipe.block_threads
    tid = kb.tid()
    out_index = _row_index(kb, item, kb.ctaid())
    p = ops.warp_reduce(_accumulate(kb, ops, rs, out_index, tid, threads))
    shared = SharedPartials(kb, ops, threads // WARP)
    lane = b.and_(tid, kb.i64(WARP - 1))
    with b.if_then(b.icmp_unsigned("==", lane, kb.i64(0))):
        shared.store(b.lshr(tid, kb.i64(5)), p)
    kb.nvvm.barrier()
    in_range = b.icmp_unsigned("<", lane, kb.i64(threads // WARP))
    loaded = shared.load(b.select(in_range, lane, kb.i64(0)))
    p = ops.warp_reduce(Partial(loaded.values, b.and_(loaded.valid, in_range)))
    with b.if_then(b.icmp_unsigned("==", tid, kb.i64(0))):
        _store(kb, ops, item, out_index, p)


@variant("row-reduce.warp")
def emit_warp(kb: KernelBuild) -> None:
    (item,) = kb.items()
    rs = ReduceShape.of(find_core(item.instr))
    ops = PartialOps(kb, rs)
    b = kb.b
    per_block = kb.recipe.param("rows_per_block")
    tid = kb.tid()
    lane = b.and_(tid, kb.i64(WARP - 1))
    row = b.add(b.mul(kb.ctaid(), kb.i64(per_block)), b.lshr(tid, kb.i64(5)))
    live = b.icmp_unsigned("<", row, kb.i64(rs.rows))
    row = b.select(live, row, kb.i64(0))
    out_index = _row_index(kb, item, row)
    # Lanes of a row past the end start beyond the row: their partial stays empty.
    start = b.select(live, lane, kb.i64(rs.row_length))
    p = ops.warp_reduce(_accumulate(kb, ops, rs, out_index, start, WARP))
    with b.if_then(b.and_(live, b.icmp_unsigned("==", lane, kb.i64(0)))):
        _store(kb, ops, item, out_index, p)
