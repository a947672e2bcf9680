"""gather (general dimension numbers, batching dims included) as index remapping.

Each output index splits into batch positions (dims not in offset_dims) and window offsets;
start indices come from the indices operand and are clamped so the slice stays in bounds.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Opcode
from .indexing import clamp_index, index_to_i64
from .registry import emits
from .types import elem_type


@emits(Opcode.GATHER)
def gather(ctx, instr, gens):
    operand_gen, indices_gen = gens
    dn = instr.attrs.gather_dnums
    sizes = instr.attrs.gather_slice_sizes
    operand = instr.operands[0].shape
    indices = instr.operands[1].shape
    idx_et = elem_type(indices.element_type)
    offset_dims = list(dn.offset_dims)
    batch_out = [d for d in range(instr.shape.rank) if d not in offset_dims]
    window_dims = [d for d in range(operand.rank)
                   if d not in dn.collapsed_slice_dims and d not in dn.operand_batching_dims]
    ivd = dn.index_vector_dim
    b = ctx.builder

    def index_of(batch: list[ir.Value], k: int | None) -> list[ir.Value]:
        """Index into the indices array: batch positions with the vector position k inserted."""
        if ivd == indices.rank:
            return list(batch)
        return list(batch[:ivd]) + [ctx.i64(k or 0)] + list(batch[ivd:])

    def generate(index):
        batch = [index[d] for d in batch_out]
        full: list[ir.Value] = [ctx.i64(0)] * operand.rank
        for k, d in enumerate(dn.start_index_map):
            start = index_to_i64(ctx, idx_et, indices_gen(index_of(batch, k)))
            full[d] = clamp_index(ctx, start, 0, operand.dims[d] - sizes[d])
        for d, idim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims, strict=True):
            full[d] = batch[idim if idim < ivd else idim - 1]
        for d, od in zip(window_dims, offset_dims, strict=True):
            full[d] = b.add(full[d], index[od])
        return operand_gen(full)

    return generate
