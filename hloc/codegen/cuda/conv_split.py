"""Convolutions with few outputs and long sums (weight gradients): threads share an output.

The loop kernel gives each output element one thread, which sums its input features x
window taps serially (hloc.codegen.cuda.conv). That suits forward convolutions: many outputs,
short sums. The weight gradient of a training step is the opposite: kh*kw*cin*cout outputs,
each a sum over the batch and every spatial position (tens of thousands of terms), so a few
hundred threads would do all the work. Here `group` threads share each output element:

- `conv.split`: thread t of a group sums terms t, t+group, ... of the flattened reduction
  (input feature major, window taps minor); each warp combines its lanes' partials with
  shuffles. A group of 32 is one warp (several outputs per block); a larger group is the whole
  block (one output per block), whose warps then combine through shared memory after a
  barrier. Thread 0 of the group applies the fusion's elementwise epilogue
  (epilogue.store_with_core) and stores.

Sums are combined in a fixed tree, so results are deterministic, but not in the loop kernel's
serial order: float results differ from it in the last bits, as any parallel sum does.
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Opcode
from ..elemental.indexing import delinearize
from .conv import ConvTerms
from .epilogue import find_core, store_with_core
from .kernel import KernelBuild, dims, variant
from .loop import physical_index
from .parts import Part, PlanContext, plans

WARP = 32
SPLIT_FROM = 512  # terms per output element from which threads share an output
# Outputs up to which one thread each would leave most of a GPU idle (a forward convolution
# has far more: it keeps one thread per output, or cuDNN).
MAX_OUTPUTS = 1 << 15
# Aim: this many threads in flight; groups grow from a warp to a block until it is reached.
TARGET_THREADS = 1 << 17
BLOCK = 256


def group_size(outputs: int, terms: int) -> int:
    """Threads per output element: a warp, or a block when outputs are too few to fill the
    GPU with warps (never more threads than terms)."""
    group = WARP
    while group < BLOCK and outputs * group < TARGET_THREADS and group * 2 <= terms // 4:
        group *= 2
    return group


@plans(Opcode.CONVOLUTION)
def plan_conv_split(pc: PlanContext, k: int) -> list[Part] | None:
    """conv.split for long sums; else a fused convolution cuDNN can run is split off its
    epilogue (conv_core); else None: the loop kernel."""
    item = pc.items[k]
    core = find_core(item.instr)
    if core is None or core.opcode != Opcode.CONVOLUTION or len(item.outputs) != 1:
        return None
    lhs, rhs = core.operands[0].shape, core.operands[1].shape
    if not (lhs.is_array and rhs.is_array):
        return None
    dn = core.attrs.conv_dnums
    terms = rhs.dims[dn.kernel_input_feature_dimension]
    for wd in core.attrs.window.dims:
        terms *= wd.size
    outputs = pc.output_shapes[item.outputs[0]].num_elements
    if terms < SPLIT_FROM or not 0 < outputs <= MAX_OUTPUTS or outputs * terms < (1 << 20):
        from .conv_core import plan_split

        return plan_split(pc, k)  # cuDNN's convolution, then the epilogue; or None
    group = group_size(outputs, terms)
    per_block = BLOCK // group
    blocks = -(-outputs // per_block)
    if blocks > pc.target.limits.max_grid_x:
        return None
    shared = 0 if group == WARP else (BLOCK // WARP) * 8
    return [Part("conv.split", (k,), dims((blocks,), (BLOCK,)), (("group", group),),
                 shared_bytes=shared)]


@variant("conv.split")
def emit_conv_split(kb: KernelBuild) -> None:
    (item,) = kb.items()
    core = find_core(item.instr)
    terms = ConvTerms(kb.ctx, core, [kb.gen(op) for op in core.operands])
    group = kb.recipe.param("group")
    b, ctx = kb.b, kb.ctx
    out_shape = kb.output_shapes[item.outputs[0]]
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
        acc = _block_sum(kb, terms, acc, tid, lane)
        leader = b.icmp_unsigned("==", tid, kb.i64(0))
    else:
        leader = b.icmp_unsigned("==", lane, kb.i64(0))
    with b.if_then(b.and_(live, leader)):
        store_with_core(kb, item, core, index, [terms.finish(acc)])


def _warp_sum(kb: KernelBuild, terms: ConvTerms, value: ir.Value) -> ir.Value:
    """Lane 0 ends with the sum of the warp's 32 values."""
    for delta in (16, 8, 4, 2, 1):
        value = terms.combine(value, kb.nvvm.shuffle("down", value, delta))
    return value


def _block_sum(kb: KernelBuild, terms: ConvTerms, value: ir.Value, tid, lane) -> ir.Value:
    """Thread 0 ends with the sum of every warp's lane-0 value (one output per block)."""
    b = kb.b
    warps = BLOCK // WARP
    array = kb.nvvm.shared(value.type, warps, 8)
    with b.if_then(b.icmp_unsigned("==", lane, kb.i64(0))):
        b.store(value, b.gep(array, [b.lshr(tid, kb.i64(5))], source_etype=value.type))
    kb.nvvm.barrier()
    in_range = b.icmp_unsigned("<", lane, kb.i64(warps))
    loaded = b.load(b.gep(array, [b.select(in_range, lane, kb.i64(0))],
                          source_etype=value.type), typ=value.type)
    return _warp_sum(kb, terms, b.select(in_range, loaded, terms.zero()))
