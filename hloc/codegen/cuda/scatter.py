"""Scatter kernels (alone or as a fusion root), in place when the output is the operand.

Parts: `scatter.copy` first copies the operand into the output unless they are the same
buffer; then the updates, race-free in one of three ways:
- `scatter.atomic`: a single add, max or min combiner on f32/f64/s32/s64/u32/u64 — one
  thread per update element, atomics into the output (XLA GPU's method): `atomicrmw add`
  (float sums in any order), integer `atomicrmw max/min`, and for floats a compare-and-swap
  loop that stores an update only where it wins under a strict total order (NaN over every
  number, as max and min propagate NaN; +0 over -0 for max, -0 over +0 for min; NaNs by
  their bits), so the result does not depend on the order the updates land in;
- `scatter.parallel`: `unique_indices` promises no two updates touch one element — one
  thread per update element, plain read-combine-write (chosen before atomics);
- `scatter.serial`: anything else (overwrite, multiply, narrow types, variadic, ...) — one
  block walks the scatter indices in order, its threads split each update window, with a
  barrier between indices, so later updates win exactly as in a sequential scatter.
A window that does not fit entirely inside the operand is skipped (as XLA CPU does).
"""

from __future__ import annotations

import math

from llvmlite import ir

from ...ir import Instruction, Opcode, PrimitiveType
from ..elemental.compare import total_order_of_bits
from ..elemental.compose import emit_scalar_computation
from ..elemental.indexing import index_to_i64
from ..elemental.memory import element_pointer, linear_offset, load_element, store_element
from ..elemental.reduction import simple_reducer
from ..elemental.scalar import int_bits_of_float
from ..elemental.types import I1, elem_type
from .kernel import KernelBuild, dims, variant
from .loop import loop_launch, physical_index
from .parts import Part, PlanContext, plans

SERIAL_THREADS = 256
_ATOMIC_OPS = frozenset({Opcode.ADD, Opcode.MAXIMUM, Opcode.MINIMUM})
_ATOMIC_TYPES = frozenset({PrimitiveType.F32, PrimitiveType.F64, PrimitiveType.S32,
                           PrimitiveType.S64, PrimitiveType.U32, PrimitiveType.U64})


class Geometry:
    """Index arithmetic of one scatter instruction."""

    def __init__(self, instr: Instruction):
        self.instr = instr
        self.n = (len(instr.operands) - 1) // 2
        self.dn = instr.attrs.scatter_dnums
        self.operand = instr.operands[0].shape
        self.indices = instr.operands[self.n].shape
        self.updates = instr.operands[self.n + 1].shape
        self.window = list(self.dn.update_window_dims)
        self.scatter_dims = [d for d in range(self.updates.rank) if d not in self.window]
        self.op_window = [d for d in range(self.operand.rank)
                          if d not in self.dn.inserted_window_dims
                          and d not in self.dn.input_batching_dims]

    @property
    def num_indices(self) -> int:
        return math.prod(self.updates.dims[d] for d in self.scatter_dims)

    @property
    def window_size(self) -> int:
        return math.prod(self.updates.dims[d] for d in self.window)

    def extent(self, d: int) -> int:
        return self.updates.dims[self.window[self.op_window.index(d)]] if d in self.op_window else 1

    def starts(self, kb: KernelBuild, batch: list[ir.Value]) -> list[ir.Value]:
        """Operand start index of the update at scatter position `batch`."""
        ivd, idx_gen = self.dn.index_vector_dim, kb.gen(self.instr.operands[self.n])
        idx_et = elem_type(self.indices.element_type)
        starts = [kb.i64(0)] * self.operand.rank
        for k, d in enumerate(self.dn.scatter_dims_to_operand_dims):
            pos = list(batch) if ivd == self.indices.rank else \
                list(batch[:ivd]) + [kb.i64(k)] + list(batch[ivd:])
            starts[d] = index_to_i64(kb.ctx, idx_et, idx_gen(pos))
        for d, idim in zip(self.dn.input_batching_dims, self.dn.scatter_indices_batching_dims,
                           strict=True):
            starts[d] = batch[idim if idim < ivd else idim - 1]
        return starts

    def fits(self, kb: KernelBuild, starts) -> ir.Value:
        b = kb.b
        ok = ir.Constant(I1, 1)
        for d in range(self.operand.rank):
            ok = b.and_(ok, b.icmp_signed(">=", starts[d], kb.i64(0)))
            end = b.add(starts[d], kb.i64(self.extent(d)))
            ok = b.and_(ok, b.icmp_signed("<=", end, kb.i64(self.operand.dims[d])))
        return ok

    def destination(self, kb: KernelBuild, starts, update_index) -> list[ir.Value]:
        dest = list(starts)
        for d, wd in zip(self.op_window, self.window, strict=True):
            dest[d] = kb.b.add(starts[d], update_index[wd])
        return dest

    def update_index(self, kb: KernelBuild, scatter_linear, window_linear) -> list[ir.Value]:
        from .reduce_common import split_index

        index = split_index(kb, scatter_linear, self.updates, self.scatter_dims)
        index.update(split_index(kb, window_linear, self.updates, self.window))
        return [index.get(d, kb.i64(0)) for d in range(self.updates.rank)]


def _in_place(pc: PlanContext, k: int, g: Geometry, out: int) -> bool:
    operand = g.instr.operands[out]
    if pc.instr.opcode != Opcode.FUSION:
        return pc.aliased(pc.items[k].outputs[out], out)
    return operand.opcode == Opcode.PARAMETER and pc.aliased(
        pc.items[k].outputs[out], operand.attrs.parameter_number)


@plans(Opcode.SCATTER)
def plan_scatter(pc: PlanContext, k: int) -> list[Part] | None:
    item = pc.items[k]
    if item.instr.opcode != Opcode.SCATTER:
        return None
    g = Geometry(item.instr)
    parts = []
    for out in range(g.n):
        if not _in_place(pc, k, g, out):
            n = max(1, g.operand.num_elements)
            launch = loop_launch(n, 1, pc.target)
            parts.append(Part("scatter.copy", (k,), launch, (("output", out),), late=True))
    if g.num_indices == 0 or g.window_size == 0:
        return parts
    parts.append(_update_part(item.instr, g, k, pc))
    return parts


def _update_part(instr: Instruction, g: Geometry, k: int, pc: PlanContext) -> Part:
    total = g.num_indices * g.window_size
    et = instr.shape.element_type if g.n == 1 else None
    if instr.attrs.unique_indices:
        return Part("scatter.parallel", (k,), loop_launch(total, 1, pc.target), late=True)
    if g.n == 1 and simple_reducer(instr.called[0]) in _ATOMIC_OPS and et in _ATOMIC_TYPES:
        return Part("scatter.atomic", (k,), loop_launch(total, 1, pc.target), late=True)
    return Part("scatter.serial", (k,), dims((1,), (SERIAL_THREADS,)), late=True)


@variant("scatter.copy")
def emit_copy(kb: KernelBuild) -> None:
    (item,) = kb.items()
    out = kb.recipe.param("output")
    shape = kb.output_shapes[item.outputs[out]]
    source = kb.gen(item.instr.operands[out])
    b = kb.b
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(max(1, shape.num_elements)))):
        index = physical_index(kb, shape, linear)
        store_element(kb.ctx, shape, kb.outputs[item.outputs[out]], index, source(index))


def _update_element(kb: KernelBuild, g: Geometry, linear, combine) -> None:
    b = kb.b
    scatter_linear = b.udiv(linear, kb.i64(g.window_size))
    window_linear = b.urem(linear, kb.i64(g.window_size))
    update_index = g.update_index(kb, scatter_linear, window_linear)
    batch = [update_index[d] for d in g.scatter_dims]
    starts = g.starts(kb, batch)
    with b.if_then(g.fits(kb, starts)):
        combine(g.destination(kb, starts, update_index), update_index)


def _read_combine_write(kb: KernelBuild, g: Geometry, dest, update_index) -> None:
    (item,) = kb.items()
    shapes = [kb.output_shapes[o] for o in item.outputs]
    current = [load_element(kb.ctx, s, kb.outputs[o], dest) for s, o in zip(shapes, item.outputs,
                                                                            strict=True)]
    updates = [kb.gen(u)(list(update_index)) for u in g.instr.operands[g.n + 1:]]
    new = emit_scalar_computation(kb.ctx, g.instr.called[0], current + updates)
    for s, o, v in zip(shapes, item.outputs, new, strict=True):
        store_element(kb.ctx, s, kb.outputs[o], dest, v)


def _atomic(kb: KernelBuild, g: Geometry, dest, update_index) -> None:
    (item,) = kb.items()
    shape = kb.output_shapes[item.outputs[0]]
    et = elem_type(shape.element_type)
    ptr = element_pointer(kb.ctx, et, kb.outputs[item.outputs[0]],
                          linear_offset(kb.ctx, shape, dest))
    value = kb.gen(g.instr.operands[g.n + 1])(list(update_index))
    op = simple_reducer(g.instr.called[0])
    if op == Opcode.ADD:
        kb.b.atomic_rmw("fadd" if et.is_float else "add", ptr, value, "monotonic")
    elif not et.is_float:
        name = "max" if op == Opcode.MAXIMUM else "min"
        kb.b.atomic_rmw(name if et.kind == "int" else "u" + name, ptr, value, "monotonic")
    else:
        _compare_and_swap(kb, ptr, value, op == Opcode.MAXIMUM)


def _wins(b: ir.IRBuilder, update: ir.Value, current: ir.Value, largest: bool) -> ir.Value:
    """Whether float `update` replaces `current`: NaN beats every number, numbers by the
    total order (-0 < +0), NaNs by their bits; a strict order, so the winner of a set of
    updates is the same in every arrival order."""
    ity = int_bits_of_float(update)
    u, c = b.bitcast(update, ity), b.bitcast(current, ity)
    u_nan, c_nan = b.fcmp_unordered("uno", update, update), b.fcmp_unordered("uno", current, current)
    uk, ck = total_order_of_bits(b, u), total_order_of_bits(b, c)
    number = b.icmp_signed(">" if largest else "<", uk, ck)
    both_nan = b.and_(u_nan, c_nan)
    return b.select(both_nan, b.icmp_unsigned(">", u, c),
                    b.select(u_nan, ir.Constant(I1, 1),
                             b.select(c_nan, ir.Constant(I1, 0), number)))


def _compare_and_swap(kb: KernelBuild, ptr: ir.Value, value: ir.Value, largest: bool) -> None:
    b = kb.b
    ity = int_bits_of_float(value)
    iptr = b.bitcast(ptr, ity.as_pointer(ptr.type.addrspace))
    new = b.bitcast(value, ity)
    first = b.load_atomic(iptr, "monotonic", ity.width // 8, typ=ity)
    start = b.block
    head, attempt, done = (b.append_basic_block(f"cas.{n}") for n in ("head", "try", "done"))
    b.branch(head)
    b.position_at_end(head)
    seen = b.phi(ity)
    seen.add_incoming(first, start)
    b.cbranch(_wins(b, value, b.bitcast(seen, value.type), largest), attempt, done)
    b.position_at_end(attempt)
    pair = b.cmpxchg(iptr, seen, new, "monotonic", "monotonic")
    seen.add_incoming(b.extract_value(pair, 0), attempt)
    b.cbranch(b.extract_value(pair, 1), done, head)
    b.position_at_end(done)


def _parallel(kb: KernelBuild, combine) -> None:
    (item,) = kb.items()
    g = Geometry(item.instr)
    b = kb.b
    linear = b.add(b.mul(kb.ctaid(), kb.ntid()), kb.tid())
    with b.if_then(b.icmp_unsigned("<", linear, kb.i64(g.num_indices * g.window_size))):
        _update_element(kb, g, linear, lambda dest, ui: combine(kb, g, dest, ui))


@variant("scatter.atomic")
def emit_atomic(kb: KernelBuild) -> None:
    _parallel(kb, _atomic)


@variant("scatter.parallel")
def emit_parallel(kb: KernelBuild) -> None:
    _parallel(kb, _read_combine_write)


@variant("scatter.serial")
def emit_serial(kb: KernelBuild) -> None:
    (item,) = kb.items()
    g = Geometry(item.instr)
    b, ctx = kb.b, kb.ctx
    with ctx.loop(0, g.num_indices, "index") as i:
        update_index = g.update_index(kb, i, kb.i64(0))
        starts = g.starts(kb, [update_index[d] for d in g.scatter_dims])
        with b.if_then(g.fits(kb, starts)):
            with ctx.loop(kb.tid(), kb.i64(g.window_size), "w", step=SERIAL_THREADS) as w:
                ui = g.update_index(kb, i, w)
                _read_combine_write(kb, g, g.destination(kb, starts, ui), ui)
        kb.nvvm.barrier()
