"""Tree-reduction rewriter: long float reductions sum in windows of 32 first, as XLA CPU does.

XLA CPU (its TreeReductionRewriter, run to a fixpoint in the simplification pipeline) turns a
reduce with a reduced dimension longer than 32 into

    reduce(reduce-window(x, window 32 and stride 32 along every reduced dimension longer than
                         32 (the whole dimension otherwise), "SAME" padding: the padding split
                         evenly, the extra element high), reduced dimensions)

and rewrites the new, shorter reduce again until every reduced dimension is at most 32. Each
window and the final reduce combine their elements in order, so this fixes the order, and so
the rounding, of a float sum: a sum of 40 f16 values is (x[0..19] + x[20..39]) with padding
12/12, not a left-to-right sum. Reductions whose order cannot change their value are left
alone: integer and pred ones, and float max/min (hloc's max and min are exact and
commutative, ±0 and NaN included).

XLA hands one kind of reduce to YNNPACK instead, whose order is its own: an f32 or f64 add,
max or min of at least 4096 input elements (`library-elements`). Those keep hloc's own
vectorized reduction kernels; the rewrite applies below that size and to every other float
reduce (f16, bf16, f8, complex, products, reducers that are not one op).
"""

from __future__ import annotations

from ..ir import Instruction, Module, Opcode, PrimitiveType, Window, WindowDimension
from ..ir.computation import scalar_binary_root
from ..util.record import dataclass
from .base import Pass, option, register_pass
from .reduce_window_rewriter import reduce_window
from .rewrite import P, RuleTable, new, rewrite_module

Op = Opcode
_LIBRARY_TYPES = frozenset({PrimitiveType.F32, PrimitiveType.F64})
_LIBRARY_OPS = frozenset({Op.ADD, Op.MAXIMUM, Op.MINIMUM})
_ORDER_FREE = frozenset({Op.MAXIMUM, Op.MINIMUM})


def _same_padding(n: int, size: int) -> tuple[int, int]:
    """XLA's "SAME" padding for stride == size: the total split evenly, the odd one high."""
    total = max(0, -(-n // size) * size - n)
    return total // 2, total - total // 2


def needs_tree(instr: Instruction, window: int, library_elements: int) -> bool:
    """True if XLA CPU evaluates this reduce as a tree whose order changes its value."""
    if instr.opcode != Op.REDUCE or len(instr.operands) != 2 or not instr.shape.is_array:
        return False
    x = instr.operands[0].shape
    if x.num_elements == 0 or all(x.dims[d] <= window for d in instr.attrs.dimensions):
        return False  # an empty reduce is its init value; short ones are XLA's loops
    dtype = x.dtype
    if not (dtype.is_float or dtype.is_complex):
        return False
    root = scalar_binary_root(instr.called[0])
    op = root.opcode if root is not None else None
    if op in _ORDER_FREE and not dtype.is_complex:
        return False
    in_library = (x.element_type in _LIBRARY_TYPES and op in _LIBRARY_OPS
                  and x.num_elements >= library_elements)
    return not in_library


def tree_reduce(instr: Instruction, size: int) -> Instruction:
    """reduce(x) → reduce(reduce-window(x)) with windows of `size` (see the module docstring)."""
    x, init = instr.operands
    fn = instr.called[0]
    reduced = set(instr.attrs.dimensions)
    dims = []
    for d, n in enumerate(x.shape.dims):
        if d not in reduced:
            dims.append(WindowDimension(1))
            continue
        w = min(n, size)
        low, high = _same_padding(n, w)
        dims.append(WindowDimension(w, stride=w, padding_low=low, padding_high=high))
    partial = reduce_window(x, init, Window(tuple(dims)), fn)
    return new(Op.REDUCE, instr.shape, [partial, init], called=[fn],
               dimensions=instr.attrs.dimensions)


@register_pass
@dataclass
class TreeReductionRewriter(Pass):
    """Rewrites long float reduces into windows of 32 then a short reduce, as XLA CPU does.

    Assumes: a valid module. Guarantees: every single-result float (or complex) reduce with a
    reduced dimension longer than `window`, whose reducer is not an exact max/min and which
    XLA CPU would not hand to its reduction library (f32/f64 add/max/min of at least
    `library-elements` inputs), becomes a reduce-window with windows and strides of `window`
    and "SAME" padding followed by a reduce, rewritten again until short: XLA CPU's
    combination order. Integer, pred and variadic reduces are left as they are.
    """

    name = "tree-reduction-rewriter"
    window: int = option(32, minimum=2)
    library_elements: int = option(4096, minimum=0)

    def run(self, module: Module) -> bool:
        size, library = self.window, self.library_elements
        table = RuleTable(self.name)

        @table.rule(P(Op.REDUCE))
        def tree(instr):
            """reduce over n > window → reduce(reduce-window of window-long pieces)."""
            return tree_reduce(instr, size) if needs_tree(instr, size, library) else None

        return rewrite_module(module, table).changed
