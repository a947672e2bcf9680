"""topk by ranks: one thread per input element counts the elements that beat it.

XLA's order: the largest (or smallest) first under the total order of the element type
(floats: -NaN < -inf < ... < -0 < +0 < ... < inf < NaN), ties by position. An element
whose rank r is below k writes itself (and its position) to output slot r. No two
elements share a rank, so the writes never collide. A thread stops counting once k
elements beat its own (it cannot be written), scanning its row from its right-hand
neighbour round to its left-hand one: of a row of random values, a warp's threads stop
after about 33 k elements unless one of them is among the k (a 512 x 8192 top-10 took 19
ms on an H200 counting every element).
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Opcode
from ..elemental.compare import total_order_key
from ..elemental.memory import store_element
from ..elemental.types import I32, I64, elem_type, type_bytes
from .kernel import KernelBuild, dims, variant
from .loop import loop_launch, physical_index
from .parts import Part, PlanContext, plans
from .sort import while_loop

BLOCK_THREADS = 256
MIN_BLOCK_ROW = 1024  # shorter rows: topk.rank


def _block_shared(instr) -> int:
    """Shared bytes of topk.block: every thread's k candidates (value, position)."""
    et = elem_type(instr.operands[0].shape.element_type)
    return BLOCK_THREADS * instr.attrs.k * (type_bytes(et.value_type) + 4)


@plans(Opcode.TOPK)
def plan_topk(pc: PlanContext, k: int) -> list[Part] | None:
    instr = pc.items[k].instr
    if instr.opcode != Opcode.TOPK:
        return None
    shape = instr.operands[0].shape
    n = shape.dims[-1] if shape.rank else 1
    shared = _block_shared(instr)
    pred = elem_type(shape.element_type).kind == "pred"  # no byte-sized register type
    if n >= MIN_BLOCK_ROW and 0 < instr.attrs.k <= n and not pred and \
            shared <= pc.target.limits.max_static_shared_bytes:
        rows = max(1, shape.num_elements // n)
        return [Part("topk.block", (k,), dims((rows,), (BLOCK_THREADS,)),
                     shared_bytes=shared, block_threads=BLOCK_THREADS)]
    total = max(1, shape.num_elements)
    return [Part("topk.rank", (k,), loop_launch(total, 1, pc.target))]


def order_key(kb: KernelBuild, et, v: ir.Value) -> ir.Value:
    """An integer that orders like the total order (compare signed, unsigned for uints)."""
    return total_order_key(kb.ctx, v) if et.is_float else v


def _beats(kb: KernelBuild, et, largest: bool, a, ai, c, ci) -> ir.Value:
    """Whether element (a at position ai) comes before (c at ci)."""
    b = kb.b
    signed = et.kind not in ("uint", "pred")  # i1 read signed: true = -1
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    ka, kc = order_key(kb, et, a), order_key(kb, et, c)
    better = cmp(">" if largest else "<", ka, kc)
    return b.or_(better, b.and_(b.icmp_signed("==", ka, kc), b.icmp_signed("<", ai, ci)))


class _TopK:
    """What both kernels read of their topk item."""

    def __init__(self, kb: KernelBuild):
        (self.item,) = kb.items()
        instr = self.item.instr
        self.shape = instr.operands[0].shape
        self.n, self.k = self.shape.dims[-1], instr.attrs.k
        self.largest = instr.attrs.largest if instr.attrs.largest is not None else True
        self.et = elem_type(self.shape.element_type)
        self.gen = kb.gen(instr.operands[0])

    def outer(self, kb: KernelBuild, row: ir.Value) -> list[ir.Value]:
        """The index of row `row` (every dim but the last)."""
        shape = self.shape
        return physical_index(kb, shape.with_dims(shape.dims[:-1]), row) if shape.rank > 1 \
            else []


def _rank(kb: KernelBuild, size: int, k: int, start: ir.Value, beats_at) -> ir.Value:
    """How many of `size` entries beat entry `start` (`beats_at(q)`: whether entry q does),
    counting from start + 1 round to start - 1 and stopping at k."""
    b = kb.b
    rank = kb.ctx.alloca(I64)
    b.store(kb.i64(0), rank)

    def more(b, t):
        return b.and_(b.icmp_signed("<", t, kb.i64(size)),
                      b.icmp_signed("<", b.load(rank, typ=I64), kb.i64(k)))

    with while_loop(kb.ctx, kb.i64(1), more, lambda b, t: b.add(t, kb.i64(1)), "other") as t:
        q = b.add(start, t)
        q = b.select(b.icmp_signed(">=", q, kb.i64(size)), b.sub(q, kb.i64(size)), q)
        b.store(b.add(b.load(rank, typ=I64), b.zext(beats_at(q), I64)), rank)
    return b.load(rank, typ=I64)


@variant("topk.rank")
def emit_topk(kb: KernelBuild) -> None:
    t = _TopK(kb)
    shape, n, k, et, largest, gen = t.shape, t.n, t.k, t.et, t.largest, t.gen
    b = kb.b
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(max(1, shape.num_elements)))):
        row, pos = b.udiv(linear, kb.i64(n)), b.urem(linear, kb.i64(n))
        outer = t.outer(kb, row)
        mine = gen(outer + [pos])
        r = _rank(kb, n, k, pos,
                  lambda q: _beats(kb, et, largest, gen(outer + [q]), q, mine, pos))
        with b.if_then(b.icmp_signed("<", r, kb.i64(k))):
            _write(kb, t.item, outer + [r], mine, pos)


def _write(kb: KernelBuild, item, out: list, value: ir.Value, pos: ir.Value) -> None:
    """Output slot `out`: the element's value and its position in the row."""
    values, indices = item.outputs
    store_element(kb.ctx, kb.output_shapes[values], kb.outputs[values], out, value)
    idx_et = elem_type(kb.output_shapes[indices].element_type)
    store_element(kb.ctx, kb.output_shapes[indices], kb.outputs[indices], out,
                  kb.b.trunc(pos, idx_et.value_type))


@variant("topk.block")
def emit_topk_block(kb: KernelBuild) -> None:
    """One block per row. Each thread keeps the best k of its elements (every 256th) in
    order, in local memory; the block's 256 k candidates go to shared memory, where each
    candidate is ranked among the others as topk.rank ranks elements (stopping at k). The
    row's top k are all candidates (each is in its thread's best k), so a candidate's rank
    among them is its rank in the row."""
    top = _TopK(kb)
    n, k, et, largest, gen = top.n, top.k, top.et, top.largest, top.gen
    vt = et.value_type
    b, ctx = kb.b, kb.ctx
    row, tid = kb.ctaid(), kb.tid()
    outer = top.outer(kb, row)
    values, positions = ctx.alloca(vt, k), ctx.alloca(I64, k)
    count = ctx.alloca(I64)
    b.store(kb.i64(0), count)

    def at(arr, t, i):
        return b.gep(arr, [i], source_etype=t)

    with ctx.loop(tid, kb.i64(n), "mine", step=BLOCK_THREADS) as pos:
        x = gen(outer + [pos])
        held = b.load(count, typ=I64)
        last = kb.i64(k - 1)
        full = b.icmp_signed("==", held, kb.i64(k))
        worst = b.load(at(values, vt, last), typ=vt)
        worst_pos = b.load(at(positions, I64, last), typ=I64)
        takes = b.or_(b.not_(full), _beats(kb, et, largest, x, pos, worst, worst_pos))
        with b.if_then(takes):
            start = b.select(full, last, held)

            def moves(b, j):
                prev = b.select(b.icmp_signed(">", j, kb.i64(0)), b.sub(j, kb.i64(1)),
                                kb.i64(0))
                return b.and_(b.icmp_signed(">", j, kb.i64(0)),
                              _beats(kb, et, largest, x, pos,
                                     b.load(at(values, vt, prev), typ=vt),
                                     b.load(at(positions, I64, prev), typ=I64)))

            slot = ctx.alloca(I64)
            b.store(start, slot)
            with while_loop(ctx, start, moves, lambda b, j: b.sub(j, kb.i64(1)), "shift") as j:
                prev = b.sub(j, kb.i64(1))
                b.store(b.load(at(values, vt, prev), typ=vt), at(values, vt, j))
                b.store(b.load(at(positions, I64, prev), typ=I64), at(positions, I64, j))
                b.store(prev, slot)
            j = b.load(slot, typ=I64)
            b.store(x, at(values, vt, j))
            b.store(pos, at(positions, I64, j))
            b.store(b.select(full, held, b.add(held, kb.i64(1))), count)

    candidates = BLOCK_THREADS * k
    shared_values = kb.nvvm.shared(vt, candidates, type_bytes(vt))
    shared_positions = kb.nvvm.shared(I32, candidates, 4)
    held = b.load(count, typ=I64)
    with ctx.loop(0, k, "publish") as j:
        c = b.add(b.mul(tid, kb.i64(k)), j)
        real = b.icmp_signed("<", j, held)
        value = b.select(real, b.load(at(values, vt, j), typ=vt), ir.Constant(vt, 0))
        position = b.select(real, b.trunc(b.load(at(positions, I64, j), typ=I64), I32),
                            ir.Constant(I32, -1))
        b.store(value, at(shared_values, vt, c))
        b.store(position, at(shared_positions, I32, c))
    kb.nvvm.barrier()

    with ctx.loop(tid, kb.i64(candidates), "rank", step=BLOCK_THREADS) as c:
        mine_pos = b.load(at(shared_positions, I32, c), typ=I32)
        with b.if_then(b.icmp_signed(">=", mine_pos, ir.Constant(I32, 0))):
            mine = b.load(at(shared_values, vt, c), typ=vt)
            mine_pos64 = b.sext(mine_pos, I64)

            def beats_at(q):
                q_pos = b.load(at(shared_positions, I32, q), typ=I32)
                return b.and_(b.icmp_signed(">=", q_pos, ir.Constant(I32, 0)),
                              _beats(kb, et, largest, b.load(at(shared_values, vt, q), typ=vt),
                                     b.sext(q_pos, I64), mine, mine_pos64))

            r = _rank(kb, candidates, k, c, beats_at)
            with b.if_then(b.icmp_signed("<", r, kb.i64(k))):
                _write(kb, top.item, outer + [r], mine, mine_pos64)
