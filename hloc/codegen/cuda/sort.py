"""Sort kernels (variadic operands, comparator computation, always stable).

- `sort.bitonic`: rows up to 2048 elements: one block per row sorts it in shared memory with
  a bitonic network over the next power of two (padding slots compare after everything),
  one barrier per network step.
- longer rows merge sort through scratch memory (the outputs may share the operands'
  buffers): `sort.stage` copies every element into records (its values and its position in
  the row), then `sort.merge` passes merge sorted runs of 1, 2, 4, ... records into runs of
  twice that length, one thread per record: its place in the merged run is its index in its
  own run plus the number of records of the partner run that precede it (a binary search).
  The records move between two halves of the scratch memory; the last pass writes the
  outputs. A row of n elements takes ceil(log2 n) passes of n * log2(run) comparisons each
  (a row of 200,000: 18 passes, where counting every element's predecessors took 4e10).
All of them order equal elements by their original position, which makes every sort stable
(XLA CPU's stable sort; an unstable sort may return any order of equal elements, this one is
a valid choice).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Opcode, Shape
from ..elemental.comparator import emit_before
from ..elemental.memory import store_element
from ..elemental.types import I1, I32, I64, elem_type, type_bytes
from .kernel import KernelBuild, dims, variant
from .loop import loop_launch
from .parts import Part, PlanContext, plans
from .reduce_common import split_index

MAX_BITONIC = 2048
SCRATCH_ALIGN = 256


def _row_geometry(shape: Shape, dim: int) -> tuple[int, int]:
    n = shape.dims[dim]
    rows = math.prod(s for d, s in enumerate(shape.dims) if d != dim)
    return rows, n


def _value_bytes(instr) -> int:
    return sum(8 if o.shape.dtype.bits == 64 else 4 for o in instr.operands)


def _record_types(instr) -> list[ir.Type]:
    """How a record stores each operand's value, then the position."""
    return [_storage(elem_type(o.shape.element_type).value_type) for o in instr.operands] + [I32]



def record_offsets(instr) -> tuple[list[list[int]], int]:
    """Byte offsets in scratch of each half's arrays (one per operand, then positions), and
    the scratch size."""
    count = max(1, instr.operands[0].shape.num_elements)
    halves, total = [], 0
    for _ in range(2):
        offsets = []
        for t in _record_types(instr):
            offsets.append(total)
            total += -(-count * type_bytes(t) // SCRATCH_ALIGN) * SCRATCH_ALIGN
        halves.append(offsets)
    return halves, total


def merge_passes(n: int) -> int:
    return (n - 1).bit_length()


@plans(Opcode.SORT)
def plan_sort(pc: PlanContext, k: int) -> list[Part] | None:
    instr = pc.items[k].instr
    if instr.opcode != Opcode.SORT:
        return None
    shape = instr.operands[0].shape
    dim = instr.dimensions[0]
    rows, n = _row_geometry(shape, dim)
    size = 1 << max(1, (n - 1).bit_length())
    shared = size * (_value_bytes(instr) + 4)
    if n <= MAX_BITONIC and shared <= pc.target.limits.max_static_shared_bytes:
        threads = max(32, min(1024, size // 2))
        return [Part("sort.bitonic", tuple(range(len(pc.items))), dims((rows,), (threads,)),
                     (("size", size),), shared_bytes=shared, block_threads=threads)]
    scratch = record_offsets(instr)[1]
    items = tuple(range(len(pc.items)))
    launch = loop_launch(max(1, shape.num_elements), 1, pc.target)
    passes = merge_passes(n)
    return [Part("sort.stage", items, launch, scratch_bytes=scratch)] + [
        Part("sort.merge", items, launch, (("log_run", p), ("last", int(p == passes - 1))),
             scratch_bytes=scratch) for p in range(passes)]


class Sorter:
    """Comparisons of (values..., original position) records."""

    def __init__(self, kb: KernelBuild):
        self.kb = kb
        self.instr = kb.comp.root if kb.comp.root.opcode == Opcode.SORT else kb.instr
        self.shape = self.instr.operands[0].shape
        self.dim = self.instr.dimensions[0]
        self.rows, self.n = _row_geometry(self.shape, self.dim)

    def index(self, row: ir.Value, pos: ir.Value) -> list[ir.Value]:
        others = [d for d in range(self.shape.rank) if d != self.dim]
        index = split_index(self.kb, row, self.shape, others)
        index[self.dim] = pos
        return [index[d] for d in range(self.shape.rank)]

    def before(self, x: list[ir.Value], xi: ir.Value, y: list[ir.Value], yi: ir.Value):
        """Whether record x sorts before record y (positions break ties; -1 = padding)."""
        b = self.kb.b
        comp = self.instr.called[0]
        xy = emit_before(self.kb.ctx, comp, x, y)
        yx = emit_before(self.kb.ctx, comp, y, x)
        tie = b.and_(b.not_(yx), b.icmp_signed("<", xi, yi))
        real = b.or_(xy, tie)
        x_pad = b.icmp_signed("<", xi, ir.Constant(xi.type, 0))
        y_pad = b.icmp_signed("<", yi, ir.Constant(yi.type, 0))
        return b.and_(b.not_(x_pad), b.or_(y_pad, real))

    def store(self, row, pos, values) -> None:
        index = self.index(row, pos)
        for k, v in enumerate(values):
            store_element(self.kb.ctx, self.kb.output_shapes[k], self.kb.outputs[k], index, v)


def _storage(t: ir.Type) -> ir.Type:
    return ir.IntType(8) if isinstance(t, ir.IntType) and t.width < 8 else t


class _Shared:
    """The row being sorted, in shared memory: one array per operand plus positions."""

    def __init__(self, kb: KernelBuild, s: Sorter, size: int):
        self.kb = kb
        self.types = [elem_type(o.shape.element_type).value_type for o in s.instr.operands]
        self.arrays = [kb.nvvm.shared(_storage(t), size, 8 if _bits(t) == 64 else 4)
                       for t in self.types]
        self.pos = kb.nvvm.shared(I32, size, 4)

    def _ptr(self, arr, t, i):
        return self.kb.b.gep(arr, [i], source_etype=_storage(t))

    def load(self, i) -> tuple[list[ir.Value], ir.Value]:
        b = self.kb.b
        values = []
        for arr, t in zip(self.arrays, self.types, strict=True):
            raw = b.load(self._ptr(arr, t, i), typ=_storage(t))
            values.append(b.trunc(raw, I1) if t == I1 else raw)
        return values, b.load(b.gep(self.pos, [i], source_etype=I32), typ=I32)

    def store(self, i, values, pos) -> None:
        b = self.kb.b
        for arr, t, v in zip(self.arrays, self.types, values, strict=True):
            b.store(b.zext(v, _storage(t)) if t == I1 else v, self._ptr(arr, t, i))
        b.store(pos, b.gep(self.pos, [i], source_etype=I32))


def _bits(t: ir.Type) -> int:
    return 64 if isinstance(t, ir.DoubleType) or (isinstance(t, ir.IntType) and t.width == 64) \
        else 32


def halving_loop(ctx, start: ir.Value, name: str):
    """`for (v = start; v >= 1; v >>= 1)` as a context manager (start is i64)."""
    return while_loop(ctx, start, lambda b, v: b.icmp_signed(">=", v, ir.Constant(I64, 1)),
                  lambda b, v: b.lshr(v, ir.Constant(I64, 1)), name)


def doubling_loop(ctx, start: int, stop: int, name: str):
    """`for (v = start; v <= stop; v <<= 1)`."""
    return while_loop(ctx, ir.Constant(I64, start),
                  lambda b, v: b.icmp_signed("<=", v, ir.Constant(I64, stop)),
                  lambda b, v: b.shl(v, ir.Constant(I64, 1)), name)


class while_loop:
    """`for (v = start; cond(builder, v); v = step(builder, v))` over an i64 `v`, as a context
    manager yielding `v`; the builder ends in the loop's exit block."""

    def __init__(self, ctx, start, cond, step, name):
        self.ctx, self.start, self.cond, self.step, self.name = ctx, start, cond, step, name

    def __enter__(self):
        b = self.ctx.builder
        pre = b.block
        self.head = b.append_basic_block(f"{self.name}.head")
        body = b.append_basic_block(f"{self.name}.body")
        self.exit = b.append_basic_block(f"{self.name}.exit")
        b.branch(self.head)
        b.position_at_end(self.head)
        self.phi = b.phi(I64, name=self.name)
        self.phi.add_incoming(self.start, pre)
        b.cbranch(self.cond(b, self.phi), body, self.exit)
        b.position_at_end(body)
        return self.phi

    def __exit__(self, *exc):
        b = self.ctx.builder
        self.phi.add_incoming(self.step(b, self.phi), b.block)
        b.branch(self.head)
        b.position_at_end(self.exit)
        return False


@variant("sort.bitonic")
def emit_bitonic(kb: KernelBuild) -> None:
    s = Sorter(kb)
    size, threads = kb.recipe.param("size"), kb.recipe.block_threads
    b, ctx = kb.b, kb.ctx
    row, tid = kb.ctaid(), kb.tid()
    sh = _Shared(kb, s, size)
    gens = [kb.gen(o) for o in s.instr.operands]
    with ctx.loop(tid, kb.i64(size), "load", step=threads) as i:
        live = b.icmp_signed("<", i, kb.i64(s.n))
        with b.if_else(live) as (real, pad):
            with real:
                index = s.index(row, i)
                sh.store(i, [g(index) for g in gens], b.trunc(i, I32))
            with pad:
                sh.store(i, [ir.Constant(t, 0) for t in sh.types], ir.Constant(I32, -1))
    kb.nvvm.barrier()
    with doubling_loop(ctx, 2, size, "k") as k:
        with halving_loop(ctx, b.lshr(k, kb.i64(1)), "j") as j:
            with ctx.loop(tid, kb.i64(size // 2), "pair", step=threads) as t:
                _compare_exchange(kb, s, sh, t, j, k)
            kb.nvvm.barrier()
    with ctx.loop(tid, kb.i64(s.n), "write", step=threads) as i:
        values, _ = sh.load(i)
        s.store(row, i, values)


def _compare_exchange(kb: KernelBuild, s: Sorter, sh: _Shared, t, j, k) -> None:
    b = kb.b
    i = b.sub(b.shl(t, kb.i64(1)), b.and_(t, b.sub(j, kb.i64(1))))
    p = b.add(i, j)
    ascending = b.icmp_unsigned("==", b.and_(i, k), kb.i64(0))
    xv, xi = sh.load(i)
    yv, yi = sh.load(p)
    swap = b.select(ascending, s.before(yv, yi, xv, xi), s.before(xv, xi, yv, yi))
    with b.if_then(swap):
        sh.store(i, yv, yi)
        sh.store(p, xv, xi)


# ---- merge sort through scratch ------------------------------------------------------------------

class _Records:
    """Records in scratch: per half, one array per operand value and one of positions, each
    indexed by row * n + place."""

    def __init__(self, kb: KernelBuild, s: Sorter):
        self.kb, self.s = kb, s
        self.types = _record_types(s.instr)  # storage: operand values, then positions
        self.values = [elem_type(o.shape.element_type).value_type for o in s.instr.operands]
        self.offsets = record_offsets(s.instr)[0]

    def _ptr(self, half: int, k: int, i: ir.Value) -> ir.Value:
        b = self.kb.b
        base = b.gep(self.kb.scratch, [self.kb.i64(self.offsets[half][k])], inbounds=True,
                     source_etype=ir.IntType(8))
        t = self.types[k]
        return b.gep(b.bitcast(base, t.as_pointer()), [i], inbounds=True, source_etype=t)

    def load(self, half: int, i: ir.Value) -> tuple[list[ir.Value], ir.Value]:
        b = self.kb.b
        out = []
        for k, (t, v) in enumerate(zip(self.types, self.values, strict=False)):  # not positions
            raw = b.load(self._ptr(half, k, i), typ=t)
            out.append(b.trunc(raw, v) if v != t else raw)
        return out, b.load(self._ptr(half, len(self.values), i), typ=I32)

    def store(self, half: int, i: ir.Value, values: list[ir.Value], pos: ir.Value) -> None:
        b = self.kb.b
        for k, (t, v) in enumerate(zip(self.types, values, strict=False)):
            b.store(b.zext(v, t) if v.type != t else v, self._ptr(half, k, i))
        b.store(pos, self._ptr(half, len(self.values), i))


def _record_thread(kb: KernelBuild, s: Sorter):
    """`if (linear < elements)`, with the record's row and place in its row."""
    b = kb.b
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    guard = b.if_then(b.icmp_unsigned("<", linear, kb.i64(s.shape.num_elements)))
    return guard, linear


@variant("sort.stage")
def emit_stage(kb: KernelBuild) -> None:
    s = Sorter(kb)
    b = kb.b
    records = _Records(kb, s)
    guard, linear = _record_thread(kb, s)
    with guard:
        row, pos = b.udiv(linear, kb.i64(s.n)), b.urem(linear, kb.i64(s.n))
        index = s.index(row, pos)
        records.store(0, linear, [kb.gen(o)(index) for o in s.instr.operands],
                      b.trunc(pos, I32))


@variant("sort.merge")
def emit_merge(kb: KernelBuild) -> None:
    """One pass: runs of 2^log_run records (per row) merge pairwise into the other half."""
    s = Sorter(kb)
    b, ctx = kb.b, kb.ctx
    log_run, last = kb.recipe.param("log_run"), kb.recipe.param("last")
    src, dst = log_run % 2, (log_run + 1) % 2
    records = _Records(kb, s)
    guard, linear = _record_thread(kb, s)
    with guard:
        row, pos = b.udiv(linear, kb.i64(s.n)), b.urem(linear, kb.i64(s.n))
        row_start = b.sub(linear, pos)
        mine, mine_pos = records.load(src, linear)
        run = b.lshr(pos, kb.i64(log_run))
        partner_start = b.shl(b.xor(run, kb.i64(1)), kb.i64(log_run))
        size = b.select(b.icmp_unsigned("<", partner_start, kb.i64(s.n)),
                        b.sub(kb.i64(s.n), partner_start), kb.i64(0))
        size = b.select(b.icmp_unsigned("<", size, kb.i64(1 << log_run)), size,
                        kb.i64(1 << log_run))
        # How many records of the partner run precede this one: binary lifting over the
        # sorted run (steps 2^log_run, ..., 1).
        count = ctx.alloca(I64)
        b.store(kb.i64(0), count)
        with halving_loop(ctx, kb.i64(1 << log_run), "step") as step:
            at = b.add(b.load(count, typ=I64), step)
            with b.if_then(b.icmp_unsigned("<=", at, size)):
                other, other_pos = records.load(src, b.add(row_start,
                                                           b.add(partner_start,
                                                                 b.sub(at, kb.i64(1)))))
                with b.if_then(s.before(other, other_pos, mine, mine_pos)):
                    b.store(at, count)
        own_start = b.shl(run, kb.i64(log_run))
        merged_start = b.select(b.icmp_unsigned("<", own_start, partner_start), own_start,
                                partner_start)
        place = b.add(merged_start, b.add(b.sub(pos, own_start), b.load(count, typ=I64)))
        if last:
            s.store(row, place, mine)
        else:
            records.store(dst, b.add(row_start, place), mine, mine_pos)
