"""Transposes through shared memory (a transpose or layout-changing copy as the root).

When the output's contiguous dimension is not the input's, element-per-thread loops read
(or write) with a stride. Instead a block of 32x8 threads moves a 32x32 tile: it reads the
tile with the 32 lanes along the input's contiguous dimension, writes it to shared memory,
synchronizes, and writes the output with the lanes along the output's contiguous dimension.
Tile rows are padded to 33 entries to avoid shared-memory bank conflicts. Other dimensions
are walked by the block index.
"""

from __future__ import annotations

from ...ir import Instruction, Opcode
from ..elemental.memory import major_to_minor, store_element
from ..elemental.types import I1, I8, elem_type
from .kernel import KernelBuild, dims, variant
from .parts import Part, PlanContext, plans
from .reduce_common import split_index

TILE = 32
ROWS = 8
PITCH = TILE + 1
MIN_ELEMENTS = 1024


def _axes(instr: Instruction):
    """(output dim of the output's minor axis, output dim of the input's minor axis, perm)."""
    out, src = instr.shape, instr.operands[0].shape
    perm = list(instr.dimensions) if instr.opcode == Opcode.TRANSPOSE else list(range(out.rank))
    if out.rank < 2 or not major_to_minor(out) or not major_to_minor(src):
        return None
    a = major_to_minor(out)[-1]
    b = perm.index(major_to_minor(src)[-1])
    return (a, b, perm) if a != b else None


@plans(Opcode.TRANSPOSE, Opcode.COPY)
def plan_transpose(pc: PlanContext, k: int) -> list[Part] | None:
    instr = pc.items[k].instr
    if instr.shape.is_tuple or instr.shape.num_elements < MIN_ELEMENTS:
        return None
    axes = _axes(instr)
    if axes is None:
        return None
    a, b, _ = axes
    d = instr.shape.dims
    if d[a] < 2 or d[b] < 2:
        return None
    tiles = -(-d[a] // TILE) * -(-d[b] // TILE) * (instr.shape.num_elements // (d[a] * d[b]))
    size = 8 if instr.shape.dtype.bits == 64 else 4
    return [Part("transpose.tiled", (k,), dims((tiles,), (TILE, ROWS)),
                 shared_bytes=TILE * PITCH * size, block_threads=TILE * ROWS)]


@variant("transpose.tiled")
def emit_transpose(kb: KernelBuild) -> None:
    (item,) = kb.items()
    instr = item.instr
    a, bd, perm = _axes(instr)
    shape = kb.output_shapes[item.outputs[0]]
    d = shape.dims
    b = kb.b
    ta, tb = -(-d[a] // TILE), -(-d[bd] // TILE)
    rest_dims = [x for x in range(shape.rank) if x not in (a, bd)]
    block = kb.ctaid()
    tile_a, tile_b = b.urem(block, kb.i64(ta)), b.urem(b.udiv(block, kb.i64(ta)), kb.i64(tb))
    rest = split_index(kb, b.udiv(block, kb.i64(ta * tb)), shape, rest_dims) \
        if rest_dims else {}
    a0, b0 = b.mul(tile_a, kb.i64(TILE)), b.mul(tile_b, kb.i64(TILE))
    tx, ty = kb.tid("x"), kb.tid("y")
    vt = elem_type(shape.element_type).value_type
    st = I8 if vt == I1 else vt
    tile = kb.nvvm.shared(st, TILE * PITCH, 8 if shape.dtype.bits == 64 else 4)
    source = kb.gen(instr.operands[0])

    def out_index(ai, bi):
        index = dict(rest)
        index[a], index[bd] = ai, bi
        return [index[x] for x in range(shape.rank)]

    def slot(row, col):
        return b.gep(tile, [b.add(b.mul(row, kb.i64(PITCH)), col)], source_etype=st)

    for r in range(TILE // ROWS):
        ai, bi = b.add(a0, b.add(ty, kb.i64(ROWS * r))), b.add(b0, tx)
        with b.if_then(b.and_(b.icmp_unsigned("<", ai, kb.i64(d[a])),
                              b.icmp_unsigned("<", bi, kb.i64(d[bd])))):
            o = out_index(ai, bi)
            v = source([o[perm.index(x)] for x in range(shape.rank)])
            b.store(b.zext(v, st) if vt == I1 else v, slot(b.add(ty, kb.i64(ROWS * r)), tx))
    kb.nvvm.barrier()
    for r in range(TILE // ROWS):
        ai, bi = b.add(a0, tx), b.add(b0, b.add(ty, kb.i64(ROWS * r)))
        with b.if_then(b.and_(b.icmp_unsigned("<", ai, kb.i64(d[a])),
                              b.icmp_unsigned("<", bi, kb.i64(d[bd])))):
            raw = b.load(slot(tx, b.add(ty, kb.i64(ROWS * r))), typ=st)
            v = b.trunc(raw, I1) if vt == I1 else raw
            store_element(kb.ctx, shape, kb.outputs[item.outputs[0]], out_index(ai, bi), v)

