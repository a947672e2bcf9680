"""Native top-k: `topk` and XLA CPU's "TopK" custom-call, one work unit per row (last dim).

Small k (see `selects`) keep the best k elements seen so far in a sorted stack buffer: an
element enters only if it goes strictly before the current k-th, at the place a binary search
finds after every entry it does not go strictly before (so equal elements keep index order);
the entries behind it move one slot with memmove. On random rows few elements enter. Larger
k sort the whole row (rowsort.py) and write its first k.

Orders (as the reference interpreter): `topk` compares XLA's total order of the element type
(floats: -NaN < -inf < .. < -0 < +0 < .. < inf < NaN, on the storage bits; floats of 8 bits
or fewer widened to f32 first, as XLA CPU does), largest or smallest first; the custom-call
applies its comparator to (value, index) records like a stable sort, or the total order,
largest first, without one.
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Instruction, Opcode
from ..elemental.comparator import emit_before
from ..elemental.compare import total_order_key, total_order_of_bits
from ..elemental.context import EmitContext
from ..elemental.memory import element_pointer, from_storage, store_element
from ..elemental.types import I1, I64, ElemType, elem_type
from .custom_calls import CUSTOM_CALL_KERNELS, CustomCallKernel
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec
from .rowsort import RowOrder, computation_key, copy_bytes, while_loop
from .sort import STACK_BYTES, Rows, StagedRows, check_row, raw_reader, raw_store, storage_bytes

SELECT_MAX = 64  # selection for k up to this, or up to n / SELECT_RATIO
SELECT_RATIO = 8


# ---- orders ------------------------------------------------------------------------------------

def total_order(et: ElemType, largest: bool) -> RowOrder:
    """XLA's total order on storage bits (the interpreter's topk keys)."""
    def before(ctx: EmitContext, x, xi, y, yi) -> ir.Value:
        b = ctx.builder
        kx, ky = _key(ctx, et, x[0]), _key(ctx, et, y[0])
        cmp = b.icmp_signed if et.is_float or et.is_signed else b.icmp_unsigned
        return cmp(">" if largest else "<", kx, ky)

    return RowOrder((et,), before, (0,), raw=True, share=("total", largest))


def _key(ctx: EmitContext, et: ElemType, bits: ir.Value) -> ir.Value:
    """An integer ordering like the element (signed for floats and ints)."""
    if not et.is_float:
        return from_storage(ctx, et, bits)
    if et.bits <= 8:  # XLA CPU widens these to f32 first: the fnuz NaN orders as -NaN
        return total_order_key(ctx, from_storage(ctx, et, bits))
    if not isinstance(bits.type, ir.IntType):
        bits = ctx.builder.bitcast(bits, ir.IntType(et.bits))
    return total_order_of_bits(ctx.builder, bits)


def comparator_order(et: ElemType, instr: Instruction) -> RowOrder:
    """The custom-call's comparator on (value, s32 index) records."""
    comp = instr.called[0]
    params = comp.parameters
    if len(params) < 4:
        return RowOrder((et,), lambda ctx, x, xi, y, yi: emit_before(ctx, comp, x, y), (0,),
                        share=("sort", computation_key(comp)))
    ity = elem_type(params[2].shape.element_type).value_type

    def index(ctx: EmitContext, pos: ir.Value) -> ir.Value:
        return ctx.builder.trunc(pos, ity) if ity.width < 64 else pos

    def before(ctx: EmitContext, x, xi, y, yi) -> ir.Value:
        return emit_before(ctx, comp, [x[0], index(ctx, xi)], [y[0], index(ctx, yi)])

    return RowOrder((et,), before, (0,), share=("topk", computation_key(comp)))


# ---- planning ----------------------------------------------------------------------------------

@special_segment(Opcode.TOPK)
def plan_topk(spec: KernelSpec, item: RootItem):
    instr = item.instr
    et = elem_type(instr.operands[0].shape.element_type)
    largest = instr.attrs.largest if instr.attrs.largest is not None else True
    return TopKSegment(spec, item, total_order(et, largest))


def plan_custom_call(spec: KernelSpec, item: RootItem):
    instr = item.instr
    et = elem_type(instr.operands[0].shape.element_type)
    order = comparator_order(et, instr) if instr.called else total_order(et, True)
    return TopKSegment(spec, item, order)


def topk_work(instr: Instruction) -> int:
    """Top-k (or XLA's TopK custom-call) looks at every input element, log k each."""
    values = next(s for _, s in instr.shape.leaves())
    k = values.dims[-1] if values.dims else 1
    return sum(math.prod(o.shape.dims) for o in instr.operands) * max(1, k.bit_length())


CUSTOM_CALL_KERNELS.add("TopK", CustomCallKernel(lambda instr: True, plan_custom_call, topk_work))


class TopKSegment(Segment):
    """The best k of every row along the last dimension: values and their positions."""

    kind = "topk"

    def __init__(self, spec: KernelSpec, item: RootItem, order: RowOrder):
        instr = item.instr
        self.spec, self.item, self.order = spec, item, order
        shape = instr.operands[0].shape
        self.n = shape.dims[-1] if shape.rank else 1
        check_row(instr, self.n)
        out = spec.output_shapes[item.outputs[0]]
        self.k = out.dims[-1] if out.rank else 1
        self.rows = Rows(shape, max(0, shape.rank - 1))
        self.extent = self.rows.count if self.k > 0 and self.n > 0 else 0

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        read = raw_reader(kb, self.item.instr.operands[0])
        if self.selects():
            _Select(self, kb).emit(read, lo, hi)
        else:
            self._sorted(kb, read, lo, hi)

    def selects(self) -> bool:
        """Selection (not a whole-row sort): k small, absolutely or next to n, and its buffer
        fits on the stack."""
        buffer = self.k * (storage_bytes(self.order.columns[0]) + 8)
        return self.k < self.n and buffer <= STACK_BYTES and (
            self.k <= SELECT_MAX or self.k * SELECT_RATIO <= self.n)

    def write(self, kb: KernelBuild, index: list, r: ir.Value, raw: ir.Value, pos: ir.Value):
        """Output slot r of the row at `index`: the value's bits and its position."""
        ctx = kb.ctx
        values, positions = self.item.outputs
        index[self.rows.dim] = r
        raw_store(ctx, self.spec.output_shapes[values], kb.outputs[values], list(index), raw)
        shape = self.spec.output_shapes[positions]
        ity = elem_type(shape.element_type).value_type
        pos = ctx.builder.trunc(pos, ity) if ity.width < 64 else pos
        store_element(ctx, shape, kb.outputs[positions], list(index), pos)

    def _sorted(self, kb: KernelBuild, read, lo, hi) -> None:
        ctx = kb.ctx
        staged = StagedRows(self.order, self.n, [read])
        staged.enter(ctx)
        with ctx.loop(lo, hi, "row") as row:
            index = self.rows.index(ctx, row)
            staged.sort(ctx, index, self.rows.dim)
            with ctx.loop(0, min(self.k, self.n), "write") as r:
                q = staged.position(ctx, r)
                self.write(kb, index, r, staged.value(ctx, 0, q), q)
        staged.leave(ctx)


class _Select:
    """Selection through a sorted buffer of the best k (storage bits and positions)."""

    def __init__(self, seg: TopKSegment, kb: KernelBuild):
        self.seg, self.kb, self.ctx, self.b = seg, kb, kb.ctx, kb.ctx.builder
        self.et = seg.order.columns[0]
        self.k = seg.k
        self.bits = self.ctx.alloca(self.et.storage_type, self.k)
        self.pos = self.ctx.alloca(I64, self.k)
        self.count = self.ctx.alloca(I64)
        self.slot = self.ctx.alloca(I64)

    def entry(self, j):
        b = self.b
        bits = b.load(element_pointer(self.ctx, self.et, self.bits, j), typ=self.et.storage_type)
        return bits, b.load(b.gep(self.pos, [j], inbounds=True, source_etype=I64), typ=I64)

    def put(self, j, bits, pos) -> None:
        b = self.b
        b.store(bits, element_pointer(self.ctx, self.et, self.bits, j))
        b.store(pos, b.gep(self.pos, [j], inbounds=True, source_etype=I64))

    def beats(self, bits, pos, j) -> ir.Value:
        """Whether (bits at pos) goes strictly before buffer entry j."""
        other, other_pos = self.entry(j)
        return self.seg.order.compare_bits(self.ctx, [bits], pos, [other], other_pos)

    def emit(self, read, lo, hi) -> None:
        ctx, b, seg = self.ctx, self.b, self.seg
        with ctx.loop(lo, hi, "row") as row:
            index = seg.rows.index(ctx, row)
            b.store(ctx.i64(0), self.count)
            with ctx.loop(0, seg.n, "elem") as i:
                index[seg.rows.dim] = i
                self._offer(read(list(index)), i)
            with ctx.loop(0, self.k, "write") as r:
                bits, pos = self.entry(r)
                seg.write(self.kb, index, r, bits, pos)

    def _offer(self, bits, i) -> None:
        """Insert element i if the buffer has room or it beats the k-th entry."""
        ctx, b = self.ctx, self.b
        count = b.load(self.count, typ=I64)
        full = b.icmp_signed("==", count, ctx.i64(self.k))
        enters = ctx.select_branch(full, lambda: self.beats(bits, i, ctx.i64(self.k - 1)),
                                   lambda: ir.Constant(I1, 1))
        with b.if_then(enters):
            b.store(b.select(full, ctx.i64(self.k - 1), count), self.slot)
            self._settle(bits, i)
            b.store(ctx.call("llvm.smin.i64", [b.add(count, ctx.i64(1)), ctx.i64(self.k)]),
                    self.count)

    def _settle(self, bits, i) -> None:
        """Binary-search the first entry of [0, slot) the element beats; move it and the
        entries after it one slot right (the k-th falls off when full) and write the element."""
        ctx, b = self.ctx, self.b
        limit = b.load(self.slot, typ=I64)
        lo, hi = ctx.alloca(I64), ctx.alloca(I64)
        b.store(ctx.i64(0), lo)
        b.store(limit, hi)
        with while_loop(ctx, "sel", lambda: b.icmp_signed("<", b.load(lo, typ=I64),
                                                          b.load(hi, typ=I64))):
            lv, hv = b.load(lo, typ=I64), b.load(hi, typ=I64)
            mid = b.lshr(b.add(lv, hv), ctx.i64(1))
            beats = self.beats(bits, i, mid)
            b.store(b.select(beats, lv, b.add(mid, ctx.i64(1))), lo)
            b.store(b.select(beats, mid, hv), hi)
        t = b.load(lo, typ=I64)
        count = b.sub(limit, t)
        size = storage_bytes(self.et)
        for buf, ty, width in ((self.bits, self.et.storage_type, size), (self.pos, I64, 8)):
            src = b.gep(buf, [t], inbounds=True, source_etype=ty)
            dst = b.gep(buf, [b.add(t, ctx.i64(1))], inbounds=True, source_etype=ty)
            copy_bytes(ctx, "memmove", dst, src, b.mul(count, ctx.i64(width)))
        self.put(t, bits, i)
