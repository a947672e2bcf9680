"""Loop kernels: one thread per output element (or `unroll` elements), elemental values.

The linear thread id (blockIdx.x * blockDim.x + threadIdx.x) walks the output in memory
order, so neighbouring threads store to neighbouring addresses; it becomes a multi-index
with a bounds check. The unrolled variant gives each thread `unroll` elements spaced one
block apart (loads and stores stay coalesced).
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Shape
from ..elemental.compose import flatten
from ..elemental.indexing import delinearize
from ..elemental.memory import load_element, major_to_minor, store_element
from .kernel import KernelBuild, dims, variant
from .parts import Part, PlanContext

BLOCK = 256
UNROLL_FROM = 1 << 18  # elements; smaller outputs keep one element per thread


def loop_launch(n: int, unroll: int, target, block: int = BLOCK):
    per_thread = -(-n // unroll)
    threads = min(block, max(32, -(-per_thread // 32) * 32))
    blocks = max(1, -(-n // (threads * unroll)))
    if blocks > target.limits.max_grid_x:
        raise ValueError("output too large for one launch")
    return dims((blocks,), (threads,))


def plan_loop(pc: PlanContext, items: tuple[int, ...], core_from_output: bool = False) -> Part:
    """The loop kernel of `items`; `core_from_output`: of one item whose core (a dot an
    earlier part wrote into the output buffer) is read back from the output, element by
    element, and its epilogue applied in place."""
    shape = pc.output_shapes[pc.items[items[0]].outputs[0]]
    n = max(1, shape.num_elements)
    unroll = 4 if n >= UNROLL_FROM and n % 4 == 0 else 1
    launch = loop_launch(n, unroll, pc.target)
    params = (("unroll", unroll),) + ((("core_from_output", 1),) if core_from_output else ())
    return Part("loop", items, launch, params, block_threads=launch.block[0])


def physical_index(kb: KernelBuild, shape: Shape, linear: ir.Value) -> list[ir.Value]:
    """The logical multi-index of element `linear` in `shape`'s memory order."""
    order = major_to_minor(shape)
    index: list[ir.Value] = [kb.i64(0)] * shape.rank
    for d, v in zip(order, delinearize(kb.b, linear, [shape.dims[d] for d in order]), strict=True):
        index[d] = v
    return index


def store_items(kb: KernelBuild, items, index: list[ir.Value]) -> None:
    if kb.recipe.param("core_from_output", 0):
        from .epilogue import find_core, store_with_core

        (item,) = items
        (k,) = item.outputs
        value = load_element(kb.ctx, kb.output_shapes[k], kb.outputs[k], index)
        store_with_core(kb, item, find_core(item.instr), index, [value])
        return
    for item in items:
        values = flatten(kb.gen(item.instr)(index))
        for k, v in zip(item.outputs, values, strict=True):
            store_element(kb.ctx, kb.output_shapes[k], kb.outputs[k], index, v)


@variant("loop")
def emit_loop(kb: KernelBuild) -> None:
    items = kb.items()
    shape = kb.output_shapes[items[0].outputs[0]]
    n = max(1, shape.num_elements)
    unroll = kb.recipe.param("unroll", 1)
    b = kb.b
    ntid = kb.ntid()
    base = b.add(b.mul(kb.ctaid(), b.mul(ntid, kb.i64(unroll))), kb.tid())
    for k in range(unroll):
        linear = base if k == 0 else b.add(base, b.mul(ntid, kb.i64(k)))
        with b.if_then(b.icmp_unsigned("<", linear, kb.i64(n))):
            store_items(kb, items, physical_index(kb, shape, linear))
