"""Column reductions: the contiguous input dimension is kept, so accumulate whole rows.

For a reduce whose input's innermost (contiguous) dimension survives, the element-by-element
form would stride through memory. Instead each work unit owns a block of up to BLOCK
positions of that dimension (plus one position of the other kept dims), keeps one
accumulator per position on the stack, and sweeps the reduced dimensions with the block as
the innermost, unit-stride (vectorizable) loop. Row reductions need nothing special: the
elemental reduce already loops over the contiguous reduced dimension innermost.
"""

from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from ...ir import Instruction, Opcode
from ...ir.opcodes import ELEMENTWISE
from ..elemental.compose import regenerate
from ..elemental.indexing import delinearize
from ..elemental.memory import major_to_minor, store_element
from ..elemental.reduction import SHORT_REDUCE, Reducer
from ..elemental.types import elem_type
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec
from .loops import ROW_VECTOR_MIN

# Positions per work unit: 8 KiB of f32 accumulators (in L1), and 8 KiB contiguous runs of
# every input row, which the hardware prefetchers stream far better than 2 KiB runs (a
# 4096 x 4096 column sum on 2 Zen 3 cores: 2048 took about half the time of 512, in
# alternating runs). A wide 2-D column reduction therefore has few units (two for 4096
# columns, and never fewer than two where each keeps 64 positions): memory bandwidth, not
# cores, bounds it.
BLOCK = 2048

# Rows per partial sum of a long float column sum. A float add reduce of 4096 or more
# elements is evaluated in an order of XLA's library's choosing (passes/
# tree_reduction_rewriter.py), close to a pairwise sum; one accumulator per column running
# down 4096 rows was 20 x less accurate (a layer norm's gradient: 4.9e-4 against XLA's 2.4e-5
# from the exact sums). Summing each 64 rows on their own first gives 4.5e-5, for one more
# pass over the block's accumulators every 64 rows. Narrow blocks, whose row loop LLVM
# vectorizes (_sweep), take 1024 rows a chunk: their vector lanes are partial sums already,
# and short vector loops cost their 100000 x 3 sum 40 %.
CHUNK_ROWS = 64
NARROW_CHUNK_ROWS = 1024


def _column_reduce(instr: Instruction) -> bool:
    """A reduce that keeps its input's contiguous dimension."""
    if instr.opcode != Opcode.REDUCE:
        return False
    shape = instr.operands[0].shape
    if shape.rank == 0 or not instr.dimensions:
        return False
    inner = major_to_minor(shape)[-1]
    return inner not in instr.dimensions and shape.dims[inner] != 1


@special_segment(Opcode.REDUCE)
def plan_reduce(spec: KernelSpec, item: RootItem):
    return ColumnReduceSegment(spec, item) if _column_reduce(item.instr) else None


def plan_epilogue(spec: KernelSpec, item: RootItem):
    """A column reduction under elementwise operations (a logsumexp over rows: the log and
    the max added back after the sum), as one column-reduce segment that applies them to
    each block of results; None for any other root. Without it the root's loop computed
    each output's reduction on its own, a strided, scalar sweep down a column (a 512 x 64
    x 16 logsumexp over the 64: 0.33 -> 0.11 ms; over 16, which that loop unrolls, the same
    0.06 ms either way, and it keeps the loop)."""
    root = item.instr
    if root.opcode not in ELEMENTWISE or len(item.outputs) != 1 or not root.shape.is_array:
        return None
    found: set[Instruction] = set()
    fine: dict[int, bool] = {}
    reaches: dict[int, bool] = {}

    def reaches_reduce(instr: Instruction) -> bool:
        if id(instr) not in reaches:
            reaches[id(instr)] = instr.opcode == Opcode.REDUCE or any(
                reaches_reduce(o) for o in instr.operands)
        return reaches[id(instr)]

    def walk(instr: Instruction) -> bool:
        """Whether `instr` is fine: reaches no reduce, or reaches one column reduce
        through elementwise ops of the root's dimensions only."""
        if id(instr) in fine:
            return fine[id(instr)]
        if instr.opcode == Opcode.REDUCE and _column_reduce(instr) and \
                instr.shape.dims == root.shape.dims:
            found.add(instr)
            ok = True
        elif instr.opcode in ELEMENTWISE and instr.shape.dims == root.shape.dims:
            ok = all([walk(o) for o in instr.operands])
        else:
            ok = not reaches_reduce(instr)
        fine[id(instr)] = ok
        return ok

    if not walk(root) or len(found) != 1:
        return None
    (reduced,) = found
    shape = reduced.operands[0].shape
    if len(reduced.operands) != 2 or \
            math.prod(shape.dims[d] for d in reduced.dimensions) <= SHORT_REDUCE:
        return None  # short: the root's loop unrolls it within the vectorized output row
    return ColumnReduceSegment(spec, RootItem(reduced, item.outputs), epilogue=root)


class ColumnReduceSegment(Segment):
    kind = "column-reduce"

    def __init__(self, spec: KernelSpec, item: RootItem, epilogue: Instruction | None = None):
        """`item`: the reduce and its outputs; `epilogue`: the elementwise root computed
        from the reduce's results (plan_epilogue), written to those outputs instead."""
        self.spec, self.item, self.epilogue = spec, item, epilogue
        instr = item.instr
        self.n = len(instr.operands) // 2
        shape = instr.operands[0].shape
        self.in_shape = shape
        self.reduced = [d for d in major_to_minor(shape) if d in instr.dimensions]
        self.kept = [d for d in range(shape.rank) if d not in instr.dimensions]
        self.col = major_to_minor(shape)[-1]
        self.outer = [d for d in major_to_minor(shape) if d in self.kept and d != self.col]
        n_col = shape.dims[self.col]
        # At most BLOCK, but at least two units where the columns allow (64 or more each).
        self.block = min(n_col, BLOCK, max(64, -(-n_col // 2)))
        self.blocks = -(-n_col // self.block)
        self.extent = math.prod(shape.dims[d] for d in self.outer) * self.blocks

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx = kb.ctx
        b = ctx.builder
        instr = self.item.instr
        ets = [elem_type(o.shape.element_type, complex_ok=True) for o in instr.operands[:self.n]]
        reducer = Reducer(ctx, instr.called[0], ets)
        inputs = [kb.gen(o) for o in instr.operands[:self.n]]
        inits = [kb.gen(o) for o in instr.operands[self.n:]]
        slots = [ctx.alloca(et.value_type, self.block) for et in ets]
        with ctx.loop(lo, hi, "unit") as unit:
            row = b.udiv(unit, ctx.i64(self.blocks))
            start = b.mul(b.urem(unit, ctx.i64(self.blocks)), ctx.i64(self.block))
            stop = ctx.call("llvm.smin.i64", [b.add(start, ctx.i64(self.block)),
                                              ctx.i64(self.in_shape.dims[self.col])])
            index: list[ir.Value] = [ctx.i64(0)] * self.in_shape.rank
            outer_dims = [self.in_shape.dims[d] for d in self.outer]
            outer = delinearize(ctx.builder, row, outer_dims, fold_unit_dims=False)
            for d, v in zip(self.outer, outer, strict=True):
                index[d] = v
            self._init(kb, reducer, inits, slots, start, stop)
            if self._chunked(reducer, ets):
                self._sweep_chunks(kb, reducer, inputs, slots, ets[0], index, start, stop)
            else:
                self._sweep(kb, reducer, inputs, slots, index, start, stop)
            self._store(kb, reducer, slots, index, start, stop)

    def _chunked(self, reducer, ets) -> bool:
        """A real float sum over more than CHUNK_ROWS rows (narrow floats keep XLA's
        step-by-step rounding; their long sums are trees already)."""
        rows = math.prod(self.in_shape.dims[d] for d in self.reduced)
        et = ets[0]
        return (reducer.op == Opcode.ADD and len(ets) == 1 and et.is_float
                and not et.is_complex and not et.is_narrow_float and rows > self._chunk_rows())

    def _chunk_rows(self) -> int:
        return CHUNK_ROWS if self.block >= ROW_VECTOR_MIN else NARROW_CHUNK_ROWS

    def _sweep_chunks(self, kb, reducer, inputs, slots, et, index, start, stop):
        """_sweep for a long float sum: every CHUNK_ROWS rows summed into partials (starting
        from -0.0, the exact identity of addition) that are then added to the accumulators."""
        ctx = kb.ctx
        b = ctx.builder
        dims = [self.in_shape.dims[d] for d in self.reduced]
        rows = math.prod(dims)
        partials = ctx.alloca(et.value_type, self.block)
        wide = self.block >= ROW_VECTOR_MIN
        size = self._chunk_rows()
        with ctx.loop(0, -(-rows // size), "chunk") as chunk:
            first = b.mul(chunk, ctx.i64(size))
            last = ctx.call("llvm.smin.i64", [b.add(first, ctx.i64(size)), ctx.i64(rows)])
            with ctx.loop(start, stop, "zero") as j:
                b.store(ir.Constant(et.value_type, -0.0), self._slot_ptrs(kb, [partials], j, start)[0])
            with ctx.loop(first, last, "r", vectorize=not wide) as r:
                for d, v in zip(self.reduced, delinearize(b, r, dims, fold_unit_dims=False),
                                strict=True):
                    index[d] = v
                with ctx.loop(start, stop, "col") as j:
                    index[self.col] = j
                    ptr = self._slot_ptrs(kb, [partials], j, start)[0]
                    value = inputs[0](list(index))
                    b.store(reducer.combine([b.load(ptr, typ=et.value_type)], [value])[0], ptr)
            self._add_partials(kb, reducer, slots[0], partials, et, start, stop)

    def _add_partials(self, kb, reducer, slot, partials, et, start, stop):
        ctx = kb.ctx
        b = ctx.builder
        with ctx.loop(start, stop, "fold") as j:
            acc, part = self._slot_ptrs(kb, [slot, partials], j, start)
            total = reducer.combine([b.load(acc, typ=et.value_type)],
                                    [b.load(part, typ=et.value_type)])[0]
            b.store(total, acc)

    def _slot_ptrs(self, kb, slots, j, start):
        b = kb.ctx.builder
        local = b.sub(j, start)
        return [b.gep(s, [local], inbounds=True, source_etype=s.allocated_type) for s in slots]

    def _init(self, kb, reducer, inits, slots, start, stop):
        ctx = kb.ctx
        values = reducer.start([g([]) for g in inits])
        with ctx.loop(start, stop, "init") as j:
            for ptr, v in zip(self._slot_ptrs(kb, slots, j, start), values, strict=True):
                ctx.builder.store(v, ptr)

    def _sweep(self, kb, reducer, inputs, slots, index, start, stop):
        ctx = kb.ctx
        b = ctx.builder
        with contextlib.ExitStack() as stack:
            # LLVM unrolls a block of a few columns completely and then vectorizes the loop
            # over the reduced rows: a gather per load. Blocks of ROW_VECTOR_MIN or more
            # columns keep the vectorizer off that loop, as Nest does with short rows; their
            # unrolled columns become vector code. Narrower blocks (3 coordinates) gain
            # from vectorizing the reduced rows with interleaved loads.
            wide = self.block >= ROW_VECTOR_MIN
            for d in self.reduced:
                index[d] = stack.enter_context(ctx.loop(0, self.in_shape.dims[d], "r",
                                                        vectorize=not wide))
            j = stack.enter_context(ctx.loop(start, stop, "col"))
            index[self.col] = j
            ptrs = self._slot_ptrs(kb, slots, j, start)
            accs = [b.load(p, typ=s.allocated_type) for p, s in zip(ptrs, slots, strict=True)]
            values = [g(list(index)) for g in inputs]
            for p, v in zip(ptrs, reducer.combine(accs, values), strict=True):
                b.store(v, p)

    def _store(self, kb, reducer, slots, index, start, stop):
        ctx = kb.ctx
        b = ctx.builder
        with ctx.loop(start, stop, "out") as j:
            index[self.col] = j
            ptrs = self._slot_ptrs(kb, slots, j, start)
            accs = [b.load(p, typ=s.allocated_type) for p, s in zip(ptrs, slots, strict=True)]
            out_index = [index[d] for d in self.kept]
            results = reducer.finish(accs)
            if self.epilogue is not None:
                reduced = self.item.instr
                gen = regenerate(ctx, self.epilogue, kb.gens,
                                 {id(reduced): lambda _index: results[0]})
                results = [gen(out_index)]
            for k, v in zip(self.item.outputs, results, strict=True):
                store_element(ctx, self.spec.output_shapes[k], kb.outputs[k], out_index, v)
