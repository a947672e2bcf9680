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
            self._sweep(kb, reducer, inputs, slots, index, start, stop)
            self._store(kb, reducer, slots, index, start, stop)

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
