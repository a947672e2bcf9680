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
from ..elemental.types import I64, elem_type
from .kernel import KernelBuild, variant
from .loop import loop_launch
from .parts import Part, PlanContext, plans
from .sort import while_loop


@plans(Opcode.TOPK)
def plan_topk(pc: PlanContext, k: int) -> list[Part] | None:
    instr = pc.items[k].instr
    if instr.opcode != Opcode.TOPK:
        return None
    total = max(1, instr.operands[0].shape.num_elements)
    return [Part("topk.rank", (k,), loop_launch(total, 1, pc.target))]


def order_key(kb: KernelBuild, et, v: ir.Value) -> ir.Value:
    """An integer that orders like the total order (compare signed, unsigned for uints)."""
    return total_order_key(kb.ctx, v) if et.is_float else v


def _beats(kb: KernelBuild, et, largest: bool, a, ai, c, ci) -> ir.Value:
    """Whether element (a at position ai) comes before (c at ci)."""
    b = kb.b
    signed = et.kind != "uint"
    cmp = b.icmp_signed if signed else b.icmp_unsigned
    ka, kc = order_key(kb, et, a), order_key(kb, et, c)
    better = cmp(">" if largest else "<", ka, kc)
    return b.or_(better, b.and_(b.icmp_signed("==", ka, kc), b.icmp_signed("<", ai, ci)))


@variant("topk.rank")
def emit_topk(kb: KernelBuild) -> None:
    (item,) = kb.items()
    instr = item.instr
    shape = instr.operands[0].shape
    n, k = shape.dims[-1], instr.attrs.k
    largest = instr.attrs.largest if instr.attrs.largest is not None else True
    et = elem_type(shape.element_type)
    gen = kb.gen(instr.operands[0])
    b, ctx = kb.b, kb.ctx
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(max(1, shape.num_elements)))):
        row, pos = b.udiv(linear, kb.i64(n)), b.urem(linear, kb.i64(n))
        from .loop import physical_index

        outer = physical_index(kb, shape.with_dims(shape.dims[:-1]), row) if shape.rank > 1 \
            else []
        mine = gen(outer + [pos])
        rank = ctx.alloca(I64)
        b.store(kb.i64(0), rank)

        def more(b, t):
            return b.and_(b.icmp_signed("<", t, kb.i64(n)),
                          b.icmp_signed("<", b.load(rank, typ=I64), kb.i64(k)))

        with while_loop(ctx, kb.i64(1), more, lambda b, t: b.add(t, kb.i64(1)), "other") as t:
            q = b.add(pos, t)
            q = b.select(b.icmp_signed(">=", q, kb.i64(n)), b.sub(q, kb.i64(n)), q)
            beats = _beats(kb, et, largest, gen(outer + [q]), q, mine, pos)
            b.store(b.add(b.load(rank, typ=I64), b.zext(beats, I64)), rank)
        r = b.load(rank, typ=I64)
        with b.if_then(b.icmp_signed("<", r, kb.i64(k))):
            out = outer + [r]
            values, indices = item.outputs
            store_element(ctx, kb.output_shapes[values], kb.outputs[values], out, mine)
            idx_et = elem_type(kb.output_shapes[indices].element_type)
            store_element(ctx, kb.output_shapes[indices], kb.outputs[indices], out,
                          b.trunc(pos, idx_et.value_type))
