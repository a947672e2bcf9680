"""A sort whose only use is its first k elements becomes XLA CPU's TopK custom call.

JAX lowers `lax.approx_max_k` (and `top_k` written by hand as sort-then-slice) on the CPU to
a sort of (keys, iota) along the last dimension followed by slices [0:k]. XLA's TopkRewriter
turns that into one "TopK" custom call; the sort of a whole 65536-element row to keep 20
took 131 ms in a retrieval program where XLA's top-k took a few. This pass does the same
rewrite: the custom call applies the sort's comparator to (value, index) records like a
stable sort and returns the first k of every row with their positions, which the CPU
back end computes by selection (codegen/cpu/topk.py) and the interpreter by sorting.
"""

from __future__ import annotations

from ..ir import Attrs, Instruction, Module, Opcode, PrimitiveType, Shape
from ..util.record import dataclass
from .base import Pass, register_pass
from .rewrite import update_schedule

Op = Opcode
# Rewritten only where the custom call selects (codegen/cpu/topk.py SELECT_MAX, SELECT_RATIO):
# a k close to n sorts the whole row either way.
MAX_K = 64
K_RATIO = 8


def _is_iota_along(instr: Instruction, dim: int) -> bool:
    """s32 positions 0, 1, ... along `dim` (an iota, or a broadcast of a 1-D one)."""
    if instr.shape.element_type != PrimitiveType.S32:
        return False
    if instr.opcode == Op.IOTA:
        return tuple(instr.dimensions) == (dim,)
    if instr.opcode == Op.BROADCAST and instr.operands[0].opcode == Op.IOTA:
        inner = instr.operands[0]
        return inner.shape.rank == 1 and tuple(instr.dimensions) == (dim,)
    return False


def _keys_only(comparator) -> bool:
    """Whether the comparator reads the keys' two parameters only (not the positions)."""
    params = comparator.parameters
    return len(params) == 4 and not params[2].users and not params[3].users


def _first_k(sort: Instruction, dim: int) -> tuple[int, list[tuple[Instruction, int]]] | None:
    """(k, [(slice, output index)]) when every use of the sort is a slice [0:k] along `dim`
    of one of its outputs, whole along the others; None otherwise."""
    k, slices = None, []
    for gte in sort.users:
        if gte.opcode != Op.GET_TUPLE_ELEMENT:
            return None
        for s in gte.users:
            if s.opcode != Op.SLICE:
                return None
            for d, (spec, n) in enumerate(zip(s.attrs.slice, gte.shape.dims, strict=True)):
                if spec.start != 0 or spec.stride != 1 or (d != dim and spec.limit != n):
                    return None
            if k is None:
                k = s.attrs.slice[dim].limit
            if s.attrs.slice[dim].limit != k:
                return None
            slices.append((s, gte.attrs.tuple_index))
    return (k, slices) if k is not None and slices else None


def _rewrite(sort: Instruction) -> bool:
    keys, positions = sort.operands if len(sort.operands) == 2 else (None, None)
    if keys is None or keys.shape.rank == 0 or sort.shape.tuple_shapes[0].dtype.is_complex:
        return False
    dim = sort.dimensions[0]
    if dim != keys.shape.rank - 1 or not _is_iota_along(positions, dim):
        return False
    if not _keys_only(sort.called[0]):
        return False
    found = _first_k(sort, dim)
    if found is None:
        return False
    k, slices = found
    n = keys.shape.dims[dim]
    if not (k < n and (k <= MAX_K or k * K_RATIO <= n)):
        return False
    dims = (*keys.shape.dims[:-1], k)
    shape = Shape.tuple_of([Shape.array(keys.shape.element_type, dims),
                            Shape.array(PrimitiveType.S32, dims)])
    comp = sort.parent
    topk = comp.create(Op.CUSTOM_CALL, shape, [keys], name="topk", called=[sort.called[0]],
                       attrs=Attrs(custom_call_target="TopK"), metadata=sort.metadata)
    for s, index in slices:
        comp.replace_instruction(s, comp.create(Op.GET_TUPLE_ELEMENT, s.shape, [topk],
                                                attrs=Attrs(tuple_index=index)))
    for gte in list(sort.users):
        if not gte.users:
            comp.remove(gte)
    if not sort.users:
        comp.remove(sort)
    return True


@register_pass
@dataclass
class TopkRewriter(Pass):
    """Sort-then-slice of the first k along the last dimension becomes a TopK custom call.

    Assumes: a valid module. Guarantees: a sort of (keys, s32 iota along the sorted last
    dimension) whose comparator reads only the keys, and whose every use is a slice [0:k]
    along that dimension (k below n, at most 64 or an eighth of n), is replaced by XLA CPU's
    "TopK" custom call with the same comparator; values and positions are those of a stable
    sort's first k, as before.
    """

    name = "topk-rewriter"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in list(module.computations):
            for instr in list(comp.instructions):
                if instr.opcode == Op.SORT and instr.parent is comp:
                    changed |= _rewrite(instr)
        if changed:
            update_schedule(module)
        return changed
