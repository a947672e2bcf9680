"""Structural keys for kernels: identical kernels are emitted once and share one symbol.

Programs built from repeated blocks (unrolled loops, the rounds of a counter-based RNG, the
layers of a model) produce many fusions that differ only in instruction names. Emitting each
once cuts LLVM's work proportionally; XLA deduplicates its kernels the same way.

Two kernel specs share a key when their computations have the same instructions in the same
order (opcode, shape with layout, attributes, operand positions, called computations by
structure), and they have the same operand and output shapes and the same aliasing.
Metadata and names are ignored: they do not change the generated code.
"""

from __future__ import annotations

from ...ir import Computation
from .kernel_spec import KernelSpec


def computation_key(comp: Computation, memo: dict[int, tuple] | None = None) -> tuple:
    """A hashable structural key of `comp` (names and metadata excluded)."""
    memo = {} if memo is None else memo
    cached = memo.get(id(comp))
    if cached is not None:
        return cached
    position: dict[int, int] = {}
    items: list[tuple] = []
    for instr in comp.post_order():
        position[id(instr)] = len(items)
        items.append((instr.opcode, instr.shape, instr.attrs,
                      tuple(position[id(o)] for o in instr.operands),
                      tuple(computation_key(c, memo) for c in instr.called)))
    key = (len(comp.parameters), tuple(items))
    memo[id(comp)] = key
    return key


def kernel_key(spec: KernelSpec, memo: dict[int, tuple] | None = None) -> tuple:
    return (computation_key(spec.computation, memo), spec.operand_shapes, spec.output_shapes,
            spec.aliases)
