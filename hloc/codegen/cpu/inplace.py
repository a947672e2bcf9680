"""In-place dynamic-update-slice and scatter.

dynamic-update-slice whose output shares its buffer with operand 0 (KernelSpec.aliases)
writes only the update window: its units are the update's rows. Without the alias it is an
ordinary elemental loop. A fusion from update-fusion also outputs the value the update
copies (through reshapes): the segment computes each element of it once, storing it to that
output and into the updated buffer; it computes the fusion's other elementwise outputs of
that value's shape in the same pass (roots.pass_items), each index's values before its
stores.

scatter runs serially (one unit): copy the operand into the output unless they share a
buffer, then apply every in-bounds update window in order with the update computation
inlined; windows that do not fit entirely are skipped (XLA CPU).
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...analysis.sharing import update_source
from ...ir import Opcode
from ..elemental.compose import emit_scalar_computation
from ..elemental.indexing import clamped_starts, index_to_i64, source_index
from ..elemental.memory import load_element, store_element
from ..elemental.types import elem_type
from ..roots import copied_item, pass_items
from .kernel import SPECIAL_SEGMENTS, KernelBuild, RootItem, Segment, root_items, special_segment
from .kernel_spec import KernelSpec
from .loops import Nest


def _aliased_parameter(spec: KernelSpec, item: RootItem, k: int, operand) -> bool:
    return (operand.opcode == Opcode.PARAMETER
            and (item.outputs[k], operand.attrs.parameter_number) in spec.aliases)


@special_segment(Opcode.DYNAMIC_UPDATE_SLICE)
def plan_dus(spec: KernelSpec, item: RootItem):
    if not _aliased_parameter(spec, item, 0, item.instr.operands[0]):
        return None
    return InPlaceUpdateSegment(spec, item)


class InPlaceUpdateSegment(Segment):
    kind = "in-place-update"

    def __init__(self, spec: KernelSpec, item: RootItem):
        self.spec, self.item = spec, item
        self.nest = Nest(item.instr.operands[1].shape)
        self.extent = self.nest.extent
        self.also, self.copies = _pass_items(spec, item)

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx = kb.ctx
        b = ctx.builder
        instr = self.item.instr
        update = kb.gen(instr.operands[1])
        starts_gens = [kb.gen(o) for o in instr.operands[2:]]
        out = self.item.outputs[0]
        shape = self.spec.output_shapes[out]
        starts = clamped_starts(ctx, instr, starts_gens, shape.dims,
                                instr.operands[1].shape.dims)

        def body(index):
            dest = [b.add(s, i, flags=["nsw"]) for s, i in zip(starts, index, strict=True)]
            # Every value first, then every store: an item may overwrite what another reads
            # at this index (roots.pass_items).
            stores = []
            at = source_index(ctx, instr.operands[1], update_source(instr.operands[1]), index)
            for other in self.also:  # each of the update source's dims
                (k,) = other.outputs
                stores.append((self.spec.output_shapes[k], kb.outputs[k], at,
                               kb.gen(other.instr)(at)))
            value = stores[0][3] if self.copies else update(index)  # the copy: computed once
            for out_shape, buffer, at, v in stores:
                store_element(ctx, out_shape, buffer, at, v)
            store_element(ctx, shape, kb.outputs[out], dest, value)

        self.nest.emit(ctx, lo, hi, body)


def _pass_items(spec: KernelSpec, item: RootItem) -> tuple[tuple[RootItem, ...], bool]:
    """The items this segment computes in its pass (`pass_items`) that no special segment
    wants, and whether the first is the value the update copies (`copied_item`)."""
    items = root_items(spec)
    k = items.index(item)
    also = [j for j in pass_items(items, k) if SPECIAL_SEGMENTS.get(items[j].instr.opcode) is None]
    return tuple(items[j] for j in also), bool(also) and also[0] == copied_item(items, k)


@special_segment(Opcode.SCATTER)
def plan_scatter(spec: KernelSpec, item: RootItem):
    return ScatterSegment(spec, item)


class ScatterSegment(Segment):
    kind = "scatter"
    extent = 1

    def __init__(self, spec: KernelSpec, item: RootItem):
        self.spec, self.item = spec, item
        instr = item.instr
        self.n = (len(instr.operands) - 1) // 2
        self.extent = 1

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        instr = self.item.instr
        for k in range(self.n):
            if not _aliased_parameter(self.spec, self.item, k, instr.operands[k]):
                self._copy(kb, k)
        self._updates(kb)

    def _copy(self, kb: KernelBuild, k: int) -> None:
        out = self.item.outputs[k]
        shape = self.spec.output_shapes[out]
        source = kb.gen(self.item.instr.operands[k])
        nest = Nest(shape)
        nest.emit(kb.ctx, kb.ctx.i64(0), kb.ctx.i64(nest.extent),
                  lambda index: store_element(kb.ctx, shape, kb.outputs[out], index, source(index)))

    def _updates(self, kb: KernelBuild) -> None:
        ctx = kb.ctx
        b = ctx.builder
        instr = self.item.instr
        dn = instr.attrs.scatter_dnums
        operand = instr.operands[0].shape
        updates = instr.operands[self.n + 1].shape
        upd_gens = [kb.gen(o) for o in instr.operands[self.n + 1:]]
        window = list(dn.update_window_dims)
        op_window = [d for d in range(operand.rank)
                     if d not in dn.inserted_window_dims and d not in dn.input_batching_dims]
        with contextlib.ExitStack() as stack:
            upd_index: list[ir.Value] = [ctx.i64(0)] * updates.rank
            for d in (d for d in range(updates.rank) if d not in window):
                upd_index[d] = stack.enter_context(ctx.loop(0, updates.dims[d], "s"))
            starts, valid = self._window_start(kb, [upd_index[d] for d in range(updates.rank)
                                                    if d not in window], window, op_window)
            stack.enter_context(b.if_then(valid))
            for d in window:
                upd_index[d] = stack.enter_context(ctx.loop(0, updates.dims[d], "w"))
            dest = list(starts)
            for d, wd in zip(op_window, window, strict=True):
                dest[d] = b.add(starts[d], upd_index[wd])
            self._combine(kb, dest, [g(list(upd_index)) for g in upd_gens])

    def _window_start(self, kb: KernelBuild, batch, window, op_window):
        """The operand index where one update window starts, and whether it fits entirely."""
        ctx = kb.ctx
        b = ctx.builder
        instr = self.item.instr
        dn = instr.attrs.scatter_dnums
        operand = instr.operands[0].shape
        indices = instr.operands[self.n].shape
        updates = instr.operands[self.n + 1].shape
        idx_gen, idx_et, ivd = kb.gen(instr.operands[self.n]), elem_type(indices.element_type), \
            dn.index_vector_dim
        starts = [ctx.i64(0)] * operand.rank
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            pos = list(batch) if ivd == indices.rank else \
                list(batch[:ivd]) + [ctx.i64(k)] + list(batch[ivd:])
            starts[d] = index_to_i64(ctx, idx_et, idx_gen(pos))
        for d, idim in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims, strict=True):
            starts[d] = batch[idim if idim < ivd else idim - 1]
        valid = ir.Constant(ir.IntType(1), 1)
        for d in range(operand.rank):
            extent = updates.dims[window[op_window.index(d)]] if d in op_window else 1
            valid = b.and_(valid, b.icmp_signed(">=", starts[d], ctx.i64(0)))
            valid = b.and_(valid, b.icmp_signed(
                "<=", b.add(starts[d], ctx.i64(extent)), ctx.i64(operand.dims[d])))
        return starts, valid

    def _combine(self, kb: KernelBuild, dest, new_values) -> None:
        ctx = kb.ctx
        outs = self.item.outputs
        shapes = [self.spec.output_shapes[k] for k in outs]
        current = [load_element(ctx, s, kb.outputs[k], dest) for k, s in zip(outs, shapes,
                                                                              strict=True)]
        result = emit_scalar_computation(ctx, self.item.instr.called[0], current + new_values)
        for k, s, v in zip(outs, shapes, result, strict=True):
            store_element(ctx, s, kb.outputs[k], dest, v)
