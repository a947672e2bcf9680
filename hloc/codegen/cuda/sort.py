"""Sort kernels (variadic operands, comparator computation, always stable).

- `sort.bitonic`: rows up to 2048 elements: one block per row sorts it in shared memory with
  a bitonic network over the next power of two (padding slots compare after everything),
  one barrier per network step.
- `sort.rank`: longer rows: the operands are first staged into scratch memory (the outputs
  may share the operands' buffers), then one thread per element counts the elements that
  must precede it and writes it at that rank.
Both order equal elements by their original position, which makes every sort stable (XLA
CPU's stable sort; an unstable sort may return any order of equal elements, this one is a
valid choice).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Opcode, Shape
from ..elemental.comparator import emit_before
from ..elemental.memory import load_element, store_element
from ..elemental.types import I1, I32, I64
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


def scratch_offsets(instr) -> list[int]:
    offsets, total = [], 0
    for o in instr.operands:
        offsets.append(total)
        total += -(-o.shape.byte_size // SCRATCH_ALIGN) * SCRATCH_ALIGN
    return offsets + [total]


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
    scratch = scratch_offsets(instr)[-1]
    items = tuple(range(len(pc.items)))
    stage = loop_launch(max(1, shape.num_elements), 1, pc.target)
    return [Part("sort.stage", items, stage, scratch_bytes=scratch),
            Part("sort.rank", items, stage, scratch_bytes=scratch)]


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
    return ir.IntType(8) if t == I1 else t


class _Shared:
    """The row being sorted, in shared memory: one array per operand plus positions."""

    def __init__(self, kb: KernelBuild, s: Sorter, size: int):
        from ..elemental.types import elem_type

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
    return _while(ctx, start, lambda b, v: b.icmp_signed(">=", v, ir.Constant(I64, 1)),
                  lambda b, v: b.lshr(v, ir.Constant(I64, 1)), name)


def doubling_loop(ctx, start: int, stop: int, name: str):
    """`for (v = start; v <= stop; v <<= 1)`."""
    return _while(ctx, ir.Constant(I64, start),
                  lambda b, v: b.icmp_signed("<=", v, ir.Constant(I64, stop)),
                  lambda b, v: b.shl(v, ir.Constant(I64, 1)), name)


class _while:
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


# ---- rank sort through scratch -------------------------------------------------------------------

def _scratch_shape(s: Sorter, k: int) -> Shape:
    return s.instr.operands[k].shape


def _scratch_ptr(kb: KernelBuild, s: Sorter, k: int) -> ir.Value:
    offset = scratch_offsets(s.instr)[k]
    return kb.b.gep(kb.scratch, [kb.i64(offset)], inbounds=True, source_etype=ir.IntType(8))


@variant("sort.stage")
def emit_stage(kb: KernelBuild) -> None:
    from .loop import physical_index

    s = Sorter(kb)
    b = kb.b
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(s.shape.num_elements))):
        index = physical_index(kb, s.shape, linear)
        for k, o in enumerate(s.instr.operands):
            store_element(kb.ctx, o.shape, _scratch_ptr(kb, s, k), index, kb.gen(o)(index))


@variant("sort.rank")
def emit_rank(kb: KernelBuild) -> None:
    s = Sorter(kb)
    b, ctx = kb.b, kb.ctx
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(s.shape.num_elements))):
        row, pos = b.udiv(linear, kb.i64(s.n)), b.urem(linear, kb.i64(s.n))
        read = [lambda index, k=k: load_element(ctx, _scratch_shape(s, k),
                                                _scratch_ptr(kb, s, k), index)
                for k in range(len(s.instr.operands))]
        mine = [r(s.index(row, pos)) for r in read]
        count = ctx.alloca(I64)
        b.store(kb.i64(0), count)
        with ctx.loop(0, s.n, "other") as q:
            other = [r(s.index(row, q)) for r in read]
            earlier = s.before(other, q, mine, pos)
            b.store(b.add(b.load(count, typ=I64), b.zext(earlier, I64)), count)
        s.store(row, b.load(count, typ=I64), mine)
