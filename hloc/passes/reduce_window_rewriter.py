"""Reduce-window rewriter: whole-axis scans become a two-level tree, as XLA's ReduceWindowRewriter.

JAX lowers `cumsum`, `cumprod`, `cummax`, `cummin` and `cumlogsumexp` to a reduce-window whose
window covers the whole scan axis with stride 1 and n-1 elements of padding on one side:
element i combines every element up to i. Evaluated as written that is n²/2 combines. XLA
(base length 16 on CPU) rewrites such a scan of length n > base as

    pad the axis to K, a multiple of base, with the init value; reshape it to [K/base, base]
    outer  = the scan within each row of base elements         (windows of `base`)
    column = each row's last element (its total), [K/base]
    inner  = the exclusive scan of the columns                  (itself rewritten if long)
    result = reducer(outer, inner broadcast along the rows), reshaped to K, sliced to n

so the sum order, and with it the rounding, is XLA's; and the work is O(n·base). Reverse scans
(padding on the high side) scan the rows backwards and take each row's first element; an
exclusive scan (padding n, output n+1 long) is the inclusive one with the init value put in
front. A scan axis that is not the last one is transposed there and back.
"""

from __future__ import annotations

from ..ir import Instruction, Module, Opcode, PaddingDim, Shape, Window, WindowDimension
from ..ir.computation import scalar_binary_root
from ..ir.shape_inference.reductions import window_output_dims
from ..util.record import dataclass
from .base import Pass, option, register_pass
from .expand_builder import Emit
from .rewrite import P, RuleTable, new, rewrite_module

Op = Opcode
_b = Emit()


@dataclass(frozen=True)
class _Scan:
    """A reduce-window recognized as a scan along `axis`."""

    axis: int
    length: int
    forward: bool
    exclusive: bool


def as_scan(instr: Instruction, base: int) -> _Scan | None:
    """The scan a single-input reduce-window computes, when it is one longer than `base`."""
    if instr.opcode != Op.REDUCE_WINDOW or len(instr.operands) != 2 or not instr.shape.is_array:
        return None
    window = instr.attrs.window
    axes = [d for d, w in enumerate(window.dims) if not w.trivial]
    if len(axes) != 1:
        return None
    axis = axes[0]
    n = instr.operands[0].shape.dims[axis]
    w = window.dims[axis]
    if (n <= base or w.size != n or w.stride != 1 or w.window_reversal or w.base_dilation != 1
            or w.window_dilation != 1):
        return None
    if w.padding_high == 0 and w.padding_low in (n - 1, n):
        return _Scan(axis, n, True, w.padding_low == n)
    if w.padding_low == 0 and w.padding_high in (n - 1, n):
        return _Scan(axis, n, False, w.padding_high == n)
    return None


def _window(rank: int, axis: int, size: int, pad: int, forward: bool) -> Window:
    dims = [WindowDimension(1)] * rank
    dims[axis] = WindowDimension(size, padding_low=pad if forward else 0,
                                 padding_high=0 if forward else pad)
    return Window(tuple(dims))


def reduce_window(x: Instruction, init: Instruction, window: Window, fn) -> Instruction:
    """A detached single-input reduce-window of x."""
    dims = window_output_dims(x.shape.dims, window)
    return new(Op.REDUCE_WINDOW, Shape.array(x.shape.element_type, dims), [x, init],
               called=[fn], window=window)


def _pad(x: Instruction, value: Instruction, axis: int, low: int, high: int) -> Instruction:
    if low == 0 and high == 0:
        return x
    dims = list(x.shape.dims)
    dims[axis] += low + high
    padding = [PaddingDim()] * x.shape.rank
    padding[axis] = PaddingDim(low, high)
    return new(Op.PAD, Shape.array(x.shape.element_type, dims), [x, value], padding=tuple(padding))


def _swap(x: Instruction, a: int, b: int) -> Instruction:
    """x with dimensions a and b exchanged (its own inverse)."""
    if a == b:
        return x
    order = list(range(x.shape.rank))
    order[a], order[b] = order[b], order[a]
    return new(Op.TRANSPOSE, x.shape.with_dims([x.shape.dims[d] for d in order]).without_layout(),
               [x], dimensions=tuple(order))


def _combine(fn, a: Instruction, b: Instruction) -> Instruction:
    """fn(a, b) elementwise: the reducer's own opcode when it is one (XLA inlines such a map),
    else a map calling it."""
    root = scalar_binary_root(fn)
    if root is not None:
        first, second = (a, b) if root.operands[0] is fn.parameters[0] else (b, a)
        return new(root.opcode, a.shape, [first, second])
    return new(Op.MAP, a.shape, [a, b], called=[fn], dimensions=tuple(range(a.shape.rank)))


def rewrite_scan(instr: Instruction, scan: _Scan, base: int) -> Instruction:
    """The tree form of the scan `instr` (see the module docstring)."""
    source, init = instr.operands
    fn = instr.called[0]
    rank = source.shape.rank
    last = rank - 1
    n, forward = scan.length, scan.forward
    x = _swap(source, scan.axis, last)
    padded = -(-n // base) * base
    rows = padded // base
    x = _pad(x, init, last, 0, padded - n)
    batch = list(x.shape.dims[:last])
    tiled = _b.reshape(x, [*batch, rows, base])
    outer = reduce_window(tiled, init, _window(rank + 1, rank, base, base - 1, forward), fn)
    edge = base - 1 if forward else 0
    column = _b.reshape(_b.slice(outer, [0] * rank + [edge], [*batch, rows, edge + 1]),
                        [*batch, rows])
    carried = reduce_window(column, init, _window(rank, last, rows, rows, forward), fn)
    start = 0 if forward else 1
    carried = _b.slice(carried, [0] * last + [start], [*batch, start + rows])
    combined = _combine(fn, outer, _b.bcast(carried, outer.shape.dims, tuple(range(rank))))
    result = _swap(_b.reshape(combined, [*batch, padded]), scan.axis, last)
    result = _b.slice(result, [0] * rank, source.shape.dims)
    if scan.exclusive:
        result = _pad(result, init, scan.axis, 1 if forward else 0, 0 if forward else 1)
    result.shape = instr.shape
    return result


@register_pass
@dataclass
class ReduceWindowRewriter(Pass):
    """Rewrites whole-axis scans (cumsum, cumprod, cummax...) longer than base-length as XLA does.

    Assumes: a valid module. Guarantees: every single-input reduce-window that is an inclusive
    or exclusive, forward or reverse scan of more than base-length elements becomes scans of
    base-length windows plus a scan of the row totals (itself rewritten until short), combined
    with the reducer: the order in which XLA CPU (base length 16) combines the elements, in
    O(n·base) work instead of O(n²). Variadic (tuple) reduce-windows are left as written.
    """

    name = "reduce-window-rewriter"
    base_length: int = option(16, minimum=2)

    def run(self, module: Module) -> bool:
        table = RuleTable("reduce-window-rewriter")
        base = self.base_length

        @table.rule(P(Op.REDUCE_WINDOW))
        def tree_scan(instr):
            """reduce-window scan of n > base → scans of base plus a scan of the row totals."""
            scan = as_scan(instr, base)
            return rewrite_scan(instr, scan, base) if scan is not None else None

        return rewrite_module(module, table).changed
