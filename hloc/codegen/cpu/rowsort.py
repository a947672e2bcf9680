"""Stable sorting of one row of records in scratch memory (used by sort.py and topk.py).

A record is a packed struct of the key columns (the ones the order reads) and the element's
i32 position in the row. Records are sorted by value, not through a permutation: a
comparison then reads its operands from the record it already loaded instead of chasing an
index into each column, which keeps the merge loop's dependency chain to one load.
Insertion sort makes runs of RUN records, then bottom-up merges go back and forth between
two buffers (a pair already in order is one copy). Ties keep the earlier record: stable.
Kernels of one LLVM module whose orders have equal `share` keys call one sort function.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from dataclasses import field

from llvmlite import ir

from ...ir import Computation
from ...ir.computation import dfs_post_order
from ...ir.opcodes import Opcode
from ...util.record import dataclass
from ..elemental.context import EmitContext
from ..elemental.memory import from_storage
from ..elemental.types import I1, I32, I64, PTR, ElemType, type_bytes
from .kernel import add_denormal_mode

RUN = 16  # records per insertion-sorted run

# before(ctx, x values, x position, y values, y position) -> i1: x goes strictly before y.
# Values come one per column (undefined for columns the order does not read).
Before = Callable[[EmitContext, list, ir.Value, list, ir.Value], ir.Value]


def computation_key(comp: Computation) -> tuple:
    """A structural key of a computation: equal keys compute the same function (names and
    metadata aside)."""
    order = dfs_post_order([comp.root], lambda i: i.operands)
    index = {id(i): k for k, i in enumerate(order)}
    return tuple((i.opcode, i.shape, i.attrs, tuple(index[id(o)] for o in i.operands),
                  tuple(computation_key(c) for c in i.called)) for i in order)


def read_columns(comp: Computation, m: int) -> tuple[int, ...]:
    """The operands a comparator reads (parameters 2k and 2k+1 belong to operand k)."""
    params = {i.attrs.parameter_number for i in dfs_post_order([comp.root], lambda i: i.operands)
              if i.opcode == Opcode.PARAMETER}
    return tuple(k for k in range(m) if 2 * k in params or 2 * k + 1 in params)




@dataclass(frozen=True)
class RowOrder:
    """A strict order on a row's elements: the columns' element types, the columns `before`
    reads (`keys`), and whether it gets storage bits (`raw`) rather than register values."""

    columns: tuple[ElemType, ...]
    before: Before = field(compare=False)
    keys: tuple[int, ...]
    raw: bool = False
    # Orders with equal `share` (and fields) compare alike: one sort function serves them.
    share: object = None

    def values(self, ctx: EmitContext, bits: list[ir.Value]) -> list[ir.Value]:
        """What `before` gets for elements of the key columns with these storage bits."""
        if self.raw:
            return list(bits)
        return [from_storage(ctx, self.columns[k], v) for k, v in zip(self.keys, bits, strict=True)]

    @property
    def record_type(self) -> ir.LiteralStructType:
        key_types = [self.columns[k].storage_type if self.raw else self.columns[k].value_type
                     for k in self.keys]
        return ir.LiteralStructType(key_types + [I32], packed=True)

    @property
    def record_bytes(self) -> int:
        return sum(type_bytes(t) for t in self.record_type.elements)

    def make_record(self, ctx: EmitContext, values: list[ir.Value], pos: ir.Value) -> ir.Value:
        b = ctx.builder
        record = ir.Constant(self.record_type, None)
        for f, v in enumerate(values + [b.trunc(pos, I32)]):
            record = b.insert_value(record, v, f)
        return record

    def compare(self, ctx: EmitContext, x: ir.Value, y: ir.Value) -> ir.Value:
        """Whether record x goes strictly before record y."""
        b = ctx.builder
        n = len(self.keys)

        def unpack(record):
            keys = [b.extract_value(record, f) for f in range(n)]
            return self._per_column(keys), b.zext(b.extract_value(record, n), I64)

        return self.before(ctx, *unpack(x), *unpack(y))

    def compare_bits(self, ctx: EmitContext, x: list, xpos, y: list, ypos) -> ir.Value:
        """Whether the element with key-column storage bits x (at xpos) goes strictly before y."""
        return self.before(ctx, self._per_column(self.values(ctx, x)), xpos,
                           self._per_column(self.values(ctx, y)), ypos)

    def _per_column(self, keys: list[ir.Value]) -> list[ir.Value]:
        values = [ir.Constant(et.storage_type if self.raw else et.value_type, None)
                  for et in self.columns]
        for k, v in zip(self.keys, keys, strict=True):
            values[k] = v
        return values


def position(ctx: EmitContext, order: RowOrder, buf: ir.Value, p: ir.Value) -> ir.Value:
    """The original position (i64) of record p of a record buffer."""
    b = ctx.builder
    rec = b.load(b.gep(buf, [p], inbounds=True, source_etype=order.record_type),
                 typ=order.record_type)
    return b.zext(b.extract_value(rec, len(order.keys)), I64)


# ---- the row sort function -----------------------------------------------------------------------

# LLVM module -> {order: its sort function} (sorts with the same comparator share one).
_EMITTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def row_sort_function(ctx: EmitContext, order: RowOrder) -> ir.Function:
    """`ptr sort(ptr records, ptr tmp, i64 n)`: sorts records[0, n) stably under `order`,
    using tmp (n records) as the other merge buffer; returns whichever holds the result."""
    emitted = _EMITTED.setdefault(ctx.module, {})
    fn = emitted.get(order) if order.share is not None else None
    # (a kernel that failed after emitting it has been rolled back out of the module)
    if fn is not None and ctx.module.globals.get(fn.name) is fn:
        return fn
    fn = _emit_row_sort(ctx, order)
    if order.share is not None:
        emitted[order] = fn
    return fn


def _emit_row_sort(ctx: EmitContext, order: RowOrder) -> ir.Function:
    fn = ir.Function(ctx.module, ir.FunctionType(PTR, [PTR, PTR, I64]), ctx.unique("sort_row"))
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    add_denormal_mode(fn)  # inlining into the kernel body needs the same denormal mode
    records, tmp, n = fn.args
    sub = EmitContext(ctx.module, ir.IRBuilder(fn.append_basic_block("entry")), ctx.target,
                      prefix=ctx.prefix, native_half=ctx.native_half)
    em = _Records(sub, order)
    b = sub.builder
    runs = b.udiv(b.add(n, sub.i64(RUN - 1)), sub.i64(RUN))
    with sub.loop(0, runs, "run") as q:
        s = b.mul(q, sub.i64(RUN))
        _insertion_sort(em, records, s, _min(sub, b.add(s, sub.i64(RUN)), n))
    b.ret(_merge_passes(em, records, tmp, n))
    return fn


def _min(ctx: EmitContext, a: ir.Value, b: ir.Value) -> ir.Value:
    return ctx.call("llvm.smin.i64", [a, b])


class _Records:
    """Loads, stores, compares and copies records of a buffer."""

    def __init__(self, ctx: EmitContext, order: RowOrder):
        self.ctx, self.b, self.order = ctx, ctx.builder, order
        self.type = order.record_type

    def ptr(self, buf, i):
        return self.b.gep(buf, [i], inbounds=True, source_etype=self.type)

    def get(self, buf, i) -> ir.Value:
        return self.b.load(self.ptr(buf, i), typ=self.type)

    def put(self, buf, i, record) -> None:
        self.b.store(record, self.ptr(buf, i))

    def before(self, x, y) -> ir.Value:
        return self.order.compare(self.ctx, x, y)

    def copy(self, dst, d, src, s, count) -> None:
        """dst[d, d + count) = src[s, s + count)."""
        size = self.b.mul(count, self.ctx.i64(self.order.record_bytes))
        copy_bytes(self.ctx, "memcpy", self.ptr(dst, d), self.ptr(src, s), size)


def copy_bytes(ctx: EmitContext, kind: str, dst, src, size) -> None:
    """llvm.memcpy / llvm.memmove of `size` bytes (declared on opaque pointers, so pointers
    of any element type may be passed)."""
    fn = ctx.intrinsic(f"llvm.{kind}.p0.p0.i64", ir.VoidType(), [PTR, PTR, I64, I1])
    ctx.builder.call(fn, [dst, src, size, ir.Constant(I1, 0)])


@contextlib.contextmanager
def while_loop(ctx: EmitContext, name: str, cond: Callable[[], ir.Value]):
    """`while cond(): body` (cond is emitted in the loop head)."""
    b = ctx.builder
    head, body = b.append_basic_block(f"{name}.head"), b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    b.cbranch(cond(), body, done)
    b.position_at_end(body)
    yield
    b.branch(head)
    b.position_at_end(done)


def _insertion_sort(em: _Records, buf, s, e) -> None:
    """Stable insertion sort of buf[s, e): a record moves left past strictly later ones."""
    ctx, b = em.ctx, em.b
    slot = ctx.alloca(I64)
    with ctx.loop(b.add(s, ctx.i64(1)), e, "ins") as i:
        x = em.get(buf, i)
        b.store(i, slot)
        head, test = b.append_basic_block("ins.head"), b.append_basic_block("ins.test")
        shift, done = b.append_basic_block("ins.shift"), b.append_basic_block("ins.done")
        b.branch(head)
        b.position_at_end(head)
        j = b.load(slot, typ=I64)
        b.cbranch(b.icmp_signed(">", j, s), test, done)
        b.position_at_end(test)
        prev = em.get(buf, b.sub(j, ctx.i64(1)))
        b.cbranch(em.before(x, prev), shift, done)
        b.position_at_end(shift)
        em.put(buf, j, prev)
        b.store(b.sub(j, ctx.i64(1)), slot)
        b.branch(head)
        b.position_at_end(done)
        em.put(buf, b.load(slot, typ=I64), x)


def _merge_passes(em: _Records, records, tmp, n) -> ir.Value:
    """Merge runs of RUN, 2 RUN, ... back and forth between the buffers; the result's buffer."""
    ctx, b = em.ctx, em.b
    src, dst, width = ctx.alloca(PTR), ctx.alloca(PTR), ctx.alloca(I64)
    b.store(records, src)
    b.store(tmp, dst)
    b.store(ctx.i64(RUN), width)
    with while_loop(ctx, "pass", lambda: b.icmp_signed("<", b.load(width, typ=I64), n)):
        w, s_buf, d_buf = b.load(width, typ=I64), b.load(src, typ=PTR), b.load(dst, typ=PTR)
        w2 = b.shl(w, ctx.i64(1))
        pairs = b.udiv(b.add(n, b.sub(w2, ctx.i64(1))), w2)
        with ctx.loop(0, pairs, "pair") as q:
            s = b.mul(q, w2)
            _merge(em, s_buf, d_buf, s, _min(ctx, b.add(s, w), n), _min(ctx, b.add(s, w2), n))
        b.store(d_buf, src)
        b.store(s_buf, dst)
        b.store(w2, width)
    return b.load(src, typ=PTR)


def _merge(em: _Records, src, dst, s, m, e) -> None:
    """dst[s, e) = stable merge of the sorted src[s, m) and src[m, e)."""
    ctx, b = em.ctx, em.b
    overlap = ctx.select_branch(
        b.icmp_signed("<", m, e),
        lambda: em.before(em.get(src, m), em.get(src, b.sub(m, ctx.i64(1)))),
        lambda: ir.Constant(I1, 0))
    with b.if_else(overlap) as (merge, ordered):
        with merge:
            _merge_loop(em, src, dst, s, m, e)
        with ordered:  # already in order (or a lone run): one copy
            em.copy(dst, s, src, s, b.sub(e, s))


def _merge_loop(em: _Records, src, dst, s, m, e) -> None:
    ctx, b = em.ctx, em.b
    i, j, o = ctx.alloca(I64), ctx.alloca(I64), ctx.alloca(I64)
    b.store(s, i)
    b.store(m, j)
    b.store(s, o)

    def more():
        return b.and_(b.icmp_signed("<", b.load(i, typ=I64), m),
                      b.icmp_signed("<", b.load(j, typ=I64), e))

    with while_loop(ctx, "merge", more):
        iv, jv, ov = b.load(i, typ=I64), b.load(j, typ=I64), b.load(o, typ=I64)
        left, right = em.get(src, iv), em.get(src, jv)
        take_right = em.before(right, left)  # ties keep the left (earlier) record: stable
        em.put(dst, ov, b.select(take_right, right, left))
        step = b.zext(take_right, I64)
        b.store(b.add(jv, step), j)
        b.store(b.add(iv, b.sub(ctx.i64(1), step)), i)
        b.store(b.add(ov, ctx.i64(1)), o)
    iv, jv, ov = b.load(i, typ=I64), b.load(j, typ=I64), b.load(o, typ=I64)
    rest_left = b.sub(m, iv)
    em.copy(dst, ov, src, iv, rest_left)
    em.copy(dst, b.add(ov, rest_left), src, jv, b.sub(e, jv))
