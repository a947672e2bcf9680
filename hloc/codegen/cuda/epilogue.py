"""Epilogues: an elementwise tail computed on the result of a kernel's core op.

Fusions such as `add(dot(a, b), broadcast(bias))` (kOutput), `divide(reduce(x), n)` (a
reduce epilogue) or `subtract(w, multiply(lr, convolution(x, dy)))` (a training step's update)
have a dot, reduce or convolution *core* whose value at index i feeds only elementwise ops at
the same index i up to the root. Kernels compute the core's value themselves (a GEMM tile, a
reduction tree) or read it back (a dot cuBLAS wrote into the output: gemm.splits_epilogue; a
convolution cuDNN wrote into scratch: conv_core) and then evaluate the root's generators with
the core's generator
replaced by that value.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

from ...ir import Instruction, Opcode
from ...ir.opcodes import ELEMENTWISE
from ..elemental.compose import flatten
from ..elemental.memory import store_element
from ..elemental.registry import lookup
from .kernel import KernelBuild, RootItem

CORE_OPCODES = frozenset({Opcode.DOT, Opcode.REDUCE, Opcode.CONVOLUTION})


def _same_dims(a: Instruction, b: Instruction) -> bool:
    return not a.shape.is_tuple and not b.shape.is_tuple and a.shape.dims == b.shape.dims


def tail_of(root: Instruction) -> set[Instruction]:
    """Root and the elementwise ops (of the root's dims) it reaches backwards through them."""
    if root.opcode not in ELEMENTWISE or root.shape.is_tuple:
        return set()
    tail, stack = set(), [root]
    while stack:
        instr = stack.pop()
        if instr in tail:
            continue
        tail.add(instr)
        for op in instr.operands:
            if op.opcode in ELEMENTWISE and op.opcode != Opcode.MAP and _same_dims(op, root):
                stack.append(op)
    return tail


def find_core(root: Instruction) -> Instruction | None:
    """The dot/reduce/convolution the root computes elementwise on (or the root itself if it
    is one)."""
    if root.opcode in CORE_OPCODES:
        return root
    tail = tail_of(root)
    cores = {op for t in tail for op in t.operands
             if op.opcode in CORE_OPCODES and not op.shape.is_tuple and _same_dims(op, root)}
    if len(cores) != 1:
        return None
    core = next(iter(cores))
    if any(u not in tail for u in core.users):
        return None
    return core


def generators_with(kb: KernelBuild, overrides: dict[int, Callable]) -> dict[int, Callable]:
    """The kernel's generators with some instructions' generators replaced (and everything
    computed from them rebuilt)."""
    gens = dict(kb.gens)
    changed = set(overrides)
    for instr in kb.comp.post_order():
        if id(instr) in overrides:
            gens[id(instr)] = overrides[id(instr)]
            continue
        if instr.opcode == Opcode.PARAMETER or not any(id(o) in changed for o in instr.operands):
            continue
        lowering = lookup(instr, kb.ctx.target_kind)
        gens[id(instr)] = lowering(kb.ctx, instr, [gens[id(o)] for o in instr.operands])
        changed.add(id(instr))
    return gens


def store_with_core(kb: KernelBuild, item: RootItem, core: Instruction, index,
                    values) -> list[ir.Value]:
    """Store the item's outputs at `index`, given the core's (finished) values there; the
    values stored."""
    if item.instr is core:
        results = list(values)
    else:
        value = tuple(values) if core.shape.is_tuple else values[0]
        gens = generators_with(kb, {id(core): lambda _index: value})
        results = flatten(gens[id(item.instr)](list(index)))
    for k, v in zip(item.outputs, results, strict=True):
        store_element(kb.ctx, kb.output_shapes[k], kb.outputs[k], list(index), v)
    return results
