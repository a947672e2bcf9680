"""Native sorts: one work unit per row (a position of every dimension but the sorted one).

A unit copies its row of every operand into scratch (storage bits: the outputs are bit-exact
and may share their operands' buffers), sorts records of the comparator's key columns and
positions stably (rowsort.py), and writes each output from the scratch copy in the sorted
records' order. The comparator is inlined through elemental/comparator.py.

Scratch for one row (the staged columns and two record buffers) is a stack array up to
STACK_BYTES, else one malloc per kernel call. Sort thunks get this kernel through
thunk_kernels.NATIVE_KINDS; rows longer than 2^31 - 1 keep the thunk's host path.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode, Shape
from ..elemental.comparator import emit_before
from ..elemental.context import EmitContext
from ..elemental.indexing import delinearize
from ..elemental.memory import element_pointer, linear_offset, major_to_minor, to_storage
from ..elemental.types import PTR, ElemType, elem_type
from .kernel import KernelBuild, RootItem, Segment, special_segment
from .kernel_spec import KernelSpec
from .rowsort import RowOrder, computation_key, position, read_columns, row_sort_function
from .thunk_kernels import native_kind

STACK_BYTES = 64 * 1024
MAX_ROW = (1 << 31) - 1  # positions are i32


@native_kind("sort")
def _sort_thunk(instr: Instruction) -> bool:
    return instr.opcode == Opcode.SORT


def storage_bytes(et: ElemType) -> int:
    t = et.storage_type
    return t.width // 8 if isinstance(t, ir.IntType) else (8 if isinstance(t, ir.DoubleType) else 4)


class RowScratch:
    """One row's scratch: each column's storage array and two record buffers (`columns`,
    `records`, `tmp` once entered)."""

    def __init__(self, order: RowOrder, n: int):
        self.order, self.n = order, max(1, n)
        sizes = [self.n * storage_bytes(et) for et in order.columns]
        sizes += [self.n * order.record_bytes] * 2
        self.offsets, total = [], 0
        for size in sizes:
            self.offsets.append(total)
            total += -(-size // 16) * 16
        self.bytes = total
        self.columns: list[ir.Value] = []
        self.records = self.tmp = self._heap = None

    def enter(self, ctx: EmitContext) -> None:
        """Allocate (call before the row loop)."""
        if self.bytes <= STACK_BYTES:
            types = [et.storage_type for et in self.order.columns] + [self.order.record_type] * 2
            ptrs = [ctx.alloca(t, self.n) for t in types]
        else:
            self._heap = ctx.call("malloc", [ctx.i64(self.bytes)], ret=PTR)
            ptrs = [ctx.builder.gep(self._heap, [ctx.i64(o)], inbounds=True,
                                    source_etype=ir.IntType(8)) for o in self.offsets]
        *self.columns, self.records, self.tmp = ptrs

    def leave(self, ctx: EmitContext) -> None:
        if self._heap is not None:
            ctx.call("free", [self._heap], ret=ir.VoidType())


# ---- reading and writing rows of the kernel's arrays ----------------------------------------------

def raw_reader(kb: KernelBuild, operand: Instruction) -> Callable[[list], ir.Value]:
    """index -> an operand element's storage bits: loaded from a parameter's buffer (bit-exact),
    else the operand's generator converted to storage."""
    ctx = kb.ctx
    et = elem_type(operand.shape.element_type)
    if operand.opcode == Opcode.PARAMETER:
        n = operand.attrs.parameter_number
        shape, base = kb.spec.operand_shapes[n], kb.operands[n]
        return lambda index: raw_load(ctx, shape, base, index)
    gen = kb.gen(operand)
    return lambda index: to_storage(ctx, et, gen(index))


def raw_load(ctx: EmitContext, shape: Shape, base: ir.Value, index: list) -> ir.Value:
    et = elem_type(shape.element_type)
    ptr = element_pointer(ctx, et, base, linear_offset(ctx, shape, index))
    return ctx.builder.load(ptr, typ=et.storage_type)


def raw_store(ctx: EmitContext, shape: Shape, base: ir.Value, index: list, raw) -> None:
    et = elem_type(shape.element_type)
    ctx.builder.store(raw, element_pointer(ctx, et, base, linear_offset(ctx, shape, index)))


class Rows:
    """The rows of a shape along dimension `dim`, numbered in memory order of the others."""

    def __init__(self, shape: Shape, dim: int):
        self.dim = dim
        self.others = [d for d in major_to_minor(shape) if d != dim]
        self.count = math.prod(shape.dims[d] for d in self.others)
        self.rank = shape.rank
        self._dims = [shape.dims[d] for d in self.others]

    def index(self, ctx: EmitContext, row: ir.Value) -> list[ir.Value]:
        """The row's multi-index; position `dim` is to be filled in."""
        index = [ctx.i64(0)] * self.rank
        others = delinearize(ctx.builder, row, self._dims, fold_unit_dims=False)
        for d, v in zip(self.others, others, strict=True):
            index[d] = v
        return index


class StagedRows:
    """Sorting rows through scratch: `enter` once per kernel call, then `sort` per row, after
    which `position(p)` / `value(column, q)` read the row's sorted order."""

    def __init__(self, order: RowOrder, n: int, readers: list[Callable[[list], ir.Value]]):
        self.order, self.n, self.readers = order, n, readers
        self.scratch = RowScratch(order, n)
        self.result: ir.Value | None = None

    def enter(self, ctx: EmitContext) -> None:
        self.fn = row_sort_function(ctx, self.order)
        self.scratch.enter(ctx)

    def sort(self, ctx: EmitContext, index: list[ir.Value], dim: int) -> None:
        """Stage the row through `index` (position `dim` varies) and sort it."""
        b, sc, order = ctx.builder, self.scratch, self.order
        with ctx.loop(0, self.n, "stage") as p:
            index[dim] = p
            bits = [read(list(index)) for read in self.readers]
            for et, col, v in zip(order.columns, sc.columns, bits, strict=True):
                b.store(v, element_pointer(ctx, et, col, p))
            record = order.make_record(ctx, order.values(ctx, [bits[k] for k in order.keys]), p)
            b.store(record, b.gep(sc.records, [p], inbounds=True, source_etype=order.record_type))
        self.result = b.call(self.fn, [sc.records, sc.tmp, ctx.i64(self.n)])

    def position(self, ctx: EmitContext, p: ir.Value) -> ir.Value:
        """The original position (i64) of the p-th element in sorted order."""
        return position(ctx, self.order, self.result, p)

    def value(self, ctx: EmitContext, column: int, q: ir.Value) -> ir.Value:
        """Column `column`'s storage bits at original position q."""
        et = self.order.columns[column]
        ptr = element_pointer(ctx, et, self.scratch.columns[column], q)
        return ctx.builder.load(ptr, typ=et.storage_type)

    def leave(self, ctx: EmitContext) -> None:
        self.scratch.leave(ctx)


# ---- the sort segment ----------------------------------------------------------------------------

@special_segment(Opcode.SORT)
def plan_sort(spec: KernelSpec, item: RootItem):
    return SortSegment(spec, item)


def check_row(instr: Instruction, n: int) -> None:
    if n > MAX_ROW:
        raise UnsupportedError(f"%{instr.name}: rows of {n} elements are too long")


def sort_order(instr: Instruction) -> RowOrder:
    """The order of a sort's comparator on its operands' elements."""
    comp = instr.called[0]
    columns = tuple(elem_type(o.shape.element_type) for o in instr.operands)
    return RowOrder(columns, lambda ctx, x, xi, y, yi: emit_before(ctx, comp, x, y),
                    read_columns(comp, len(columns)), share=("sort", computation_key(comp)))


class SortSegment(Segment):
    """Sorts every row of the operands into the outputs (units: the rows)."""

    kind = "sort"

    def __init__(self, spec: KernelSpec, item: RootItem):
        instr = item.instr
        self.spec, self.item = spec, item
        shape = instr.operands[0].shape
        dim = instr.dimensions[0] if instr.dimensions else 0
        self.n = shape.dims[dim] if shape.rank else 1
        check_row(instr, self.n)
        self.rows = Rows(shape, dim)
        self.order = sort_order(instr)
        self.extent = self.rows.count if self.n > 0 else 0

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx = kb.ctx
        staged = StagedRows(self.order, self.n, [raw_reader(kb, o) for o in self.item.instr.operands])
        outputs = [(self.spec.output_shapes[k], kb.outputs[k]) for k in self.item.outputs]
        staged.enter(ctx)
        with ctx.loop(lo, hi, "row") as row:
            index = self.rows.index(ctx, row)
            staged.sort(ctx, index, self.rows.dim)
            with ctx.loop(0, self.n, "write") as p:
                index[self.rows.dim] = p
                q = staged.position(ctx, p)
                for k, (shape, base) in enumerate(outputs):
                    raw_store(ctx, shape, base, list(index), staged.value(ctx, k, q))
        staged.leave(ctx)
