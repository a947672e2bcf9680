"""Convolutions with few outputs and long sums (weight gradients): threads share an output.

The loop kernel gives each output element one thread, which sums its input features x
window taps serially (hloc.codegen.cuda.conv). That suits forward convolutions: many outputs,
short sums. The weight gradient of a training step is the opposite: kh*kw*cin*cout outputs,
each a sum over the batch and every spatial position (tens of thousands of terms), so a few
hundred threads would do all the work. Here `group` threads share each output element:

- `conv.split` with a group (few outputs, up to TILE_FROM): a block of `group` threads per
  output element; thread t sums terms t, t+group, ... of the flattened reduction (ordered by
  the lhs layout: conv.ConvTerms), each warp combines its lanes' partials with shuffles, then
  the warps through shared memory after a barrier; thread 0 applies the fusion's elementwise
  epilogue (epilogue.store_with_core) and stores.
- `conv.split` with tiles (more outputs): a block holds 32 neighbouring output elements (in
  memory order) by `slices` slices of the reduction: lane l of warp w sums slice w of the
  terms of output l, so a warp's loads walk neighbouring outputs together (coalesced where
  the output's minor dim is an operand's, as a weight gradient's output features are); warp
  0 then adds the slices' partials from shared memory in a fixed order and stores. A slice
  is every `slices`-th position of the reduction's major axes (the fewest whose positions
  the slices share evenly) by every position of the others, in nested loops of constant
  trip counts. Where the output's batch dim is not its minor dim (a weight gradient's input
  features), each lane sums a tile of `tile` neighbouring elements along it (conv.Tile):
  they share every term's taps, checks and rhs load.

Sums are combined in a fixed tree, so results are deterministic, but not in the loop kernel's
serial order: float results differ from it in the last bits, as any parallel sum does.
"""

from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from ...ir import Opcode
from ..elemental.indexing import delinearize
from .conv import ConvTerms, Tile, recipe_tile
from .epilogue import find_core, store_with_core
from .kernel import KernelBuild, dims, variant
from .loop import physical_index
from .parts import Part, PlanContext, plans

WARP = 32
SPLIT_FROM = 512  # terms per output element from which threads share an output
# Outputs up to which one thread each would leave most of a GPU idle (a forward convolution
# has far more: it keeps one thread per output, or cuDNN).
MAX_OUTPUTS = 1 << 14
TILE_FROM = 2048  # outputs from which a block holds a tile of 32 outputs (else: a group each)
MAX_SLICES = 32
MAX_TILE = 4  # output elements per lane in tile mode (conv.Tile), at most
MIN_TILE_BLOCKS = 128  # a tile is halved until the launch has this many blocks, or is 1
# Aim: this many threads in flight; groups grow from a warp to a block until it is reached.
TARGET_THREADS = 1 << 17
BLOCK = 256


def group_size(outputs: int, terms: int) -> int:
    """Threads per output element in group mode: doubled from a warp up to a block until the
    GPU has TARGET_THREADS (and a thread has at least 4 terms)."""
    group = WARP
    while group < BLOCK and outputs * group < TARGET_THREADS and group * 2 <= terms // 4:
        group *= 2
    return group


def tile_slices(outputs: int, terms: int) -> int:
    """Reduction slices per tile of 32 outputs in tile mode (a block of 32 * slices)."""
    slices = 4
    while slices < MAX_SLICES and outputs * slices < TARGET_THREADS and slices * 2 <= terms // 8:
        slices *= 2
    return slices


def sum_terms(core) -> int:
    """Terms of each output element's sum: input features x window taps."""
    dn = core.attrs.conv_dnums
    terms = core.operands[1].shape.dims[dn.kernel_input_feature_dimension]
    for wd in core.attrs.window.dims:
        terms *= wd.size
    return terms


def long_sums(outputs: int, terms: int) -> bool:
    """Whether threads should share output elements (few outputs, long sums)."""
    return terms >= SPLIT_FROM and 0 < outputs <= MAX_OUTPUTS and outputs * terms >= (1 << 20)


def lane_tile(core) -> Tile | None:
    """The tile each lane of tile mode sums: neighbouring elements along the output's batch
    dim (where that is not the output's minor dim, along which the lanes lie, and batch
    groups leave the lhs batch index the output's), MAX_TILE or fewer: halved until it
    divides the dim and leaves MIN_TILE_BLOCKS blocks of 32 lanes; None for 1."""
    dn, shape = core.attrs.conv_dnums, core.shape
    dim = dn.output_batch_dimension
    if (core.attrs.batch_group_count or 1) != 1 or \
            (shape.layout is not None and shape.layout.minor_to_major[0] == dim):
        return None
    return Tile.fitting(shape, dim, MAX_TILE, MIN_TILE_BLOCKS * WARP)


def split_part(pc: PlanContext, k: int, variant: str, core) -> Part | None:
    """A `variant` launch whose threads share each output element of convolution `core`
    (group or tile mode), or None when the grid would be too large. A tile mode block's
    shared memory holds a partial sum per lane, slice and tile element: slices are halved
    until it fits the static limit."""
    outputs, terms = max(1, core.shape.num_elements), sum_terms(core)
    if outputs >= TILE_FROM:
        tile = lane_tile(core)
        count = tile.count if tile is not None else 1
        slices = tile_slices(outputs // count, terms)
        while slices > 1 and slices * WARP * 8 * count > pc.target.limits.max_static_shared_bytes:
            slices //= 2
        blocks = -(-outputs // (WARP * count))
        if blocks > pc.target.limits.max_grid_x:
            return None
        params = (("slices", slices),) + (() if tile is None else (
            ("tile", tile.count), ("tile_dim", tile.dim)))
        return Part(variant, (k,), dims((blocks,), (WARP * slices,)), params,
                    shared_bytes=slices * WARP * 8 * count)
    group = group_size(outputs, terms)
    blocks = -(-outputs // (BLOCK // group))
    shared = 0 if group == WARP else (BLOCK // WARP) * 8
    return Part(variant, (k,), dims((blocks,), (BLOCK,)), (("group", group),),
                shared_bytes=shared)


@plans(Opcode.CONVOLUTION)
def plan_conv_split(pc: PlanContext, k: int) -> list[Part] | None:
    """A gradient convolution cuDNN's backward calls run through scratch: split off its
    epilogue (conv_core); else conv.split for long sums; else a fused convolution cuDNN can
    run is split off its epilogue (conv_core); else None: the loop kernel."""
    from .conv_bwd import scratch_form
    from .conv_core import plan_split

    item = pc.items[k]
    core = find_core(item.instr)
    if core is None or core.opcode != Opcode.CONVOLUTION or len(item.outputs) != 1:
        return None
    lhs, rhs = core.operands[0].shape, core.operands[1].shape
    if not (lhs.is_array and rhs.is_array):
        return None
    if scratch_form(core, pc.instr) is not None and (split := plan_split(pc, k)) is not None:
        return split
    outputs = pc.output_shapes[item.outputs[0]].num_elements
    if not long_sums(outputs, sum_terms(core)):
        return plan_split(pc, k)  # cuDNN's convolution, then the epilogue; or None
    part = split_part(pc, k, "conv.split", core)
    return None if part is None else [part]


@variant("conv.split")
def emit_conv_split(kb: KernelBuild) -> None:
    (item,) = kb.items()
    core = find_core(item.instr)
    emit_split(kb, core, kb.output_shapes[item.outputs[0]],
               lambda index, value: store_with_core(kb, item, core, index, [value]))


def emit_split(kb: KernelBuild, core, out_shape, store) -> None:
    """Threads sharing the elements of `out_shape` (convolution `core`'s dims): each
    element's sum ends in one thread, which calls store(index, value)."""
    terms = ConvTerms(kb.ctx, core, [kb.gen(op) for op in core.operands],
                      recipe_tile(kb.recipe, core))
    if kb.recipe.param("slices", 0):
        _emit_tiles(kb, out_shape, terms, store)
        return
    group = kb.recipe.param("group")
    b, ctx = kb.b, kb.ctx
    outputs = out_shape.num_elements
    tid = kb.tid()
    per_block = BLOCK // group
    element = b.add(b.mul(kb.ctaid(), kb.i64(per_block)), b.udiv(tid, kb.i64(group)))
    live = b.icmp_unsigned("<", element, kb.i64(outputs))
    element = b.select(live, element, kb.i64(0))
    index = physical_index(kb, out_shape, element)
    shared_parts = terms.element(index)
    # A thread of a group past the last output starts past the last term: it adds nothing.
    first = b.select(live, b.urem(tid, kb.i64(group)), kb.i64(terms.count))
    slot = ctx.alloca(terms.zero().type)
    b.store(terms.zero(), slot)
    with ctx.loop(first, kb.i64(terms.count), "t", step=group) as t:
        ivs = delinearize(b, t, terms.sizes)
        b.store(terms.add(shared_parts, ivs, b.load(slot)), slot)
    acc = _warp_sum(kb, terms, b.load(slot))
    lane = b.and_(tid, kb.i64(WARP - 1))
    if group > WARP:
        acc = _group_sum(kb, terms, acc, tid, lane, group)
        leader = b.icmp_unsigned("==", b.urem(tid, kb.i64(group)), kb.i64(0))
    else:
        leader = b.icmp_unsigned("==", lane, kb.i64(0))
    with b.if_then(b.and_(live, leader)):
        store(index, terms.finish(acc))


def _warp_sum(kb: KernelBuild, terms: ConvTerms, value: ir.Value) -> ir.Value:
    """Lane 0 ends with the sum of the warp's 32 values."""
    for delta in (16, 8, 4, 2, 1):
        value = terms.combine(value, kb.nvvm.shuffle("down", value, delta))
    return value


def _group_sum(kb: KernelBuild, terms: ConvTerms, value: ir.Value, tid, lane,
               group: int) -> ir.Value:
    """The first thread of each group of `group` threads (whole warps) ends with the sum of
    its group's lane-0 values, which go through shared memory."""
    b = kb.b
    warps, per_group = BLOCK // WARP, group // WARP
    array = kb.nvvm.shared(value.type, warps, 8)
    warp = b.lshr(tid, kb.i64(5))
    with b.if_then(b.icmp_unsigned("==", lane, kb.i64(0))):
        b.store(value, b.gep(array, [warp], source_etype=value.type))
    kb.nvvm.barrier()
    # Every warp reads its group's partials (only the first warp's sum is stored).
    first = b.mul(b.udiv(warp, kb.i64(per_group)), kb.i64(per_group))
    in_range = b.icmp_unsigned("<", lane, kb.i64(per_group))
    at = b.add(first, b.select(in_range, lane, kb.i64(0)))
    loaded = b.load(b.gep(array, [at], source_etype=value.type), typ=value.type)
    return _warp_sum(kb, terms, b.select(in_range, loaded, terms.zero()))


def _emit_tiles(kb: KernelBuild, out_shape, terms: ConvTerms, store) -> None:
    b = kb.b
    slices = kb.recipe.param("slices")
    tile = terms.tile
    lanes_shape = tile.starts(out_shape)  # the lanes walk the tiles' first elements
    tid = kb.tid()
    lane, part = b.and_(tid, kb.i64(WARP - 1)), b.lshr(tid, kb.i64(5))
    element = b.add(b.mul(kb.ctaid(), kb.i64(WARP)), lane)
    live = b.icmp_unsigned("<", element, kb.i64(lanes_shape.num_elements))
    element = b.select(live, element, kb.i64(0))
    index = tile.first(kb.ctx, physical_index(kb, lanes_shape, element))
    partials = _slice_sums(kb, terms, terms.element(index), live, part, slices, tile.count)
    ty = terms.zero().type
    array = kb.nvvm.shared(ty, slices * WARP * tile.count, 8)
    for j, value in enumerate(partials):
        b.store(value, b.gep(array, [b.add(tid, kb.i64(j * slices * WARP))], source_etype=ty))
    kb.nvvm.barrier()
    with b.if_then(b.and_(live, b.icmp_unsigned("==", part, kb.i64(0)))):
        for j in range(tile.count):
            total = terms.zero()
            for k in range(slices):  # a fixed order: the same sum every run
                at = b.add(lane, kb.i64((j * slices + k) * WARP))
                total = terms.combine(total, b.load(b.gep(array, [at], source_etype=ty),
                                                    typ=ty))
            store(tile.at(kb.ctx, index, j), terms.finish(total))


def outer_axes(sizes: list[int], slices: int) -> int:
    """How many of the reduction's major axes the slices share out: the fewest whose
    positions they share evenly, else all of them (one flattened loop)."""
    product = 1
    for m, size in enumerate(sizes, 1):
        product *= size
        if product % slices == 0:
            return m
    return len(sizes)


def _slice_sums(kb: KernelBuild, terms: ConvTerms, element: tuple, live, part, slices: int,
                count: int) -> list[ir.Value]:
    """Slice `part`'s partial sums of the tile at `element` (nothing for a dead lane):
    positions part, part + slices, ... of the outer axes (outer_axes), by every position of
    the inner ones in nested loops."""
    b, ctx = kb.b, kb.ctx
    m = outer_axes(terms.sizes, slices)
    outer, inner = terms.sizes[:m], terms.sizes[m:]
    stop = kb.i64(math.prod(outer))
    slots = []
    for _ in range(count):
        slots.append(ctx.alloca(terms.zero().type))
        b.store(terms.zero(), slots[-1])
    with ctx.loop(b.select(live, part, stop), stop, "t", step=slices) as t:
        ivs = delinearize(b, t, outer)
        with contextlib.ExitStack() as stack:
            ivs += [stack.enter_context(ctx.loop(0, size, "r")) for size in inner]
            accs = [b.load(slot) for slot in slots]
            for slot, value in zip(slots, terms.add_tile(element, ivs, accs), strict=True):
                b.store(value, slot)
    return [b.load(slot) for slot in slots]
