"""Cumulative reduce-windows as scans: each output is the one before it combined with one more
element.

JAX lowers cumsum, cumprod, cummax, cummin and cumlogsumexp to a reduce-window whose windows
all start in the padding (or at the first element) and grow by one element per output; XLA's
ReduceWindowRewriter (passes/reduce_window_rewriter.py) keeps that form within rows of 16.
Element by element, output j combines its elements afresh: about n/2 taps an output, and
each tap computes the fused producer again (a cumulative min over rows of 16 fused with an
edit-distance step computed its producer 8.5 times an element). In order, output j is output
j - 1 combined with the element its window adds: the same combines in the same order (the
taps in increasing position, padding taps skipped, as the elemental form does), so the same
bits, for any reducer.

Windows that all end at the last element (reverse scans) are suffixes: running them from the
end reverses the order of the combines, which only reducers whose result does not depend on
that order may do (integer arithmetic, bit operations, min and max).

A work unit is one row (every output dimension but the scan's). Where the scan's dimension is
not the contiguous one, a unit is a block of contiguous positions instead, each with its own
accumulator on the stack, swept together (a vectorizable inner loop) at every step.
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...ir import Instruction, Opcode
from ...util.record import dataclass
from ..elemental.memory import major_to_minor, store_element
from ..elemental.reduction import Reducer, simple_reducer
from ..elemental.types import elem_type
from .kernel import KernelBuild, RootItem, Segment
from .kernel_spec import KernelSpec
from .row_blocks import RowBlocks

# Contiguous positions per unit where the scan runs along another dimension.
BLOCK = 1024

# Reducers whose result does not depend on the order of the combines (reverse scans).
_ORDER_FREE_INT = frozenset({Opcode.ADD, Opcode.MULTIPLY, Opcode.MAXIMUM, Opcode.MINIMUM,
                             Opcode.AND, Opcode.OR, Opcode.XOR})
_ORDER_FREE_FLOAT = frozenset({Opcode.MAXIMUM, Opcode.MINIMUM})


@dataclass(frozen=True)
class Scan:
    """A reduce-window that is a scan along `axis`: step k (0 <= k < n_out) stores output
    j = k (forward) or n_out - 1 - k (reverse), after combining element first + k (forward)
    or first - k (reverse) where that lies in [0, n); `ahead` elements come before step 0."""

    axis: int
    forward: bool
    first: int  # the element step 0 adds (may lie outside the operand)
    ahead: tuple[int, int]  # [lo, hi): elements combined before step 0

    def steps(self, n: int, n_out: int) -> tuple[int, int]:
        """[lo, hi) of the steps that add an element."""
        if self.forward:
            lo, hi = -self.first, n - self.first
        else:
            lo, hi = self.first - n + 1, self.first + 1
        lo = min(max(lo, 0), n_out)
        return lo, min(max(hi, lo), n_out)


def _order_free(instr: Instruction) -> bool:
    n = len(instr.operands) // 2
    if n != 1:
        return False
    op = simple_reducer(instr.called[0])
    dtype = instr.operands[0].shape.dtype
    if dtype.is_complex:
        return False
    return op in (_ORDER_FREE_FLOAT if dtype.is_float else _ORDER_FREE_INT)


def as_scan(instr: Instruction) -> Scan | None:
    """The scan a reduce-window computes, if its windows grow by one element an output along
    one dimension (and are trivial along every other)."""
    if instr.opcode != Opcode.REDUCE_WINDOW:
        return None
    window = instr.attrs.window.dims
    axes = [d for d, wd in enumerate(window) if not wd.trivial]
    if len(axes) != 1:
        return None
    axis = axes[0]
    wd = window[axis]
    n = instr.operands[0].shape.dims[axis]
    n_out = (instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape).dims[axis]
    if (wd.stride != 1 or wd.window_dilation != 1 or wd.base_dilation != 1
            or wd.window_reversal or wd.size < 2 or n_out < 2):
        return None
    # Window j covers positions [j - padding_low, j - padding_low + size).
    last = wd.size - 1 - wd.padding_low  # window 0's last position
    if n_out - 1 - wd.padding_low <= 0:  # every window starts at or before position 0
        return Scan(axis, True, last, (0, min(n, max(0, last))))
    if last >= n - 1 and _order_free(instr):  # every window ends at or after the last
        start = n_out - 1 - wd.padding_low  # the last window's first position
        return Scan(axis, False, start, (min(n, max(0, start + 1)), n))
    return None


class ScanSegment(Segment):
    kind = "scan"

    def __init__(self, spec: KernelSpec, item: RootItem, scan: Scan):
        self.spec, self.item, self.scan = spec, item, scan
        instr = item.instr
        self.n_inputs = len(instr.operands) // 2
        self.out_shape = spec.output_shapes[item.outputs[0]]
        self.n = instr.operands[0].shape.dims[scan.axis]
        self.n_out = self.out_shape.dims[scan.axis]
        order = major_to_minor(self.out_shape)
        minor = order[-1] if order else scan.axis
        # The contiguous dimension, when it is not the scan's: swept in blocks.
        self.col = None if minor == scan.axis else minor
        self.rows = RowBlocks.of(self.out_shape, [d for d in order if d not in (scan.axis, self.col)],
                                 self.col, BLOCK)
        self.extent = self.rows.extent if self.n_out else 0
        self.ets = [elem_type(o.shape.element_type, complex_ok=True)
                    for o in instr.operands[:self.n_inputs]]
        self.types = [et.value_type for et in self.ets]

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        ctx, b = kb.ctx, kb.ctx.builder
        instr, scan = self.item.instr, self.scan
        reducer = Reducer(ctx, instr.called[0], self.ets, reassoc=False)
        inputs = [kb.gen(o) for o in instr.operands[:self.n_inputs]]
        inits = [kb.gen(o) for o in instr.operands[self.n_inputs:]]
        slots = [ctx.alloca(t, self.rows.block) for t in self.types]
        with ctx.loop(lo, hi, "unit") as unit:
            index, start, stop = self.rows.unit(ctx, unit)

            def columns(name):
                """The block's positions (one, where the scan is the contiguous dimension):
                yields the accumulators' slots of each."""
                if self.col is None:
                    return contextlib.nullcontext(slots)
                return self._columns(kb, index, slots, start, stop, name)

            first = reducer.start([g([]) for g in inits])
            with columns("init") as ptrs:
                for p, v in zip(ptrs, first, strict=True):
                    b.store(v, p)
            a_lo, a_hi = scan.ahead
            if a_lo < a_hi:
                with ctx.loop(a_lo, a_hi, "ahead") as q:
                    self._add(kb, reducer, inputs, index, q, columns)
            s_lo, s_hi = scan.steps(self.n, self.n_out)
            for k_lo, k_hi, adds in ((0, s_lo, False), (s_lo, s_hi, True),
                                     (s_hi, self.n_out, False)):
                if k_lo >= k_hi:
                    continue
                with ctx.loop(k_lo, k_hi, "step") as k:
                    if adds:
                        q = b.add(ctx.i64(scan.first), k) if scan.forward else \
                            b.sub(ctx.i64(scan.first), k)
                        self._add(kb, reducer, inputs, index, q, columns)
                    j = k if scan.forward else b.sub(ctx.i64(self.n_out - 1), k)
                    self._store(kb, reducer, index, j, columns)

    def _columns(self, kb, index, slots, start, stop, name):
        @contextlib.contextmanager
        def sweep():
            b = kb.ctx.builder
            with kb.ctx.loop(start, stop, name) as c:
                index[self.col] = c
                local = b.sub(c, start)
                yield [b.gep(s, [local], inbounds=True, source_etype=s.allocated_type)
                       for s in slots]
        return sweep()

    def _add(self, kb, reducer, inputs, index, q, columns) -> None:
        b = kb.ctx.builder
        with columns("col") as ptrs:
            at = list(index)
            at[self.scan.axis] = q
            accs = [b.load(p, typ=t) for p, t in zip(ptrs, self.types, strict=True)]
            values = [g(at) for g in inputs]
            for p, v in zip(ptrs, reducer.combine(accs, values), strict=True):
                b.store(v, p)

    def _store(self, kb, reducer, index, j, columns) -> None:
        b = kb.ctx.builder
        with columns("out") as ptrs:
            at = list(index)
            at[self.scan.axis] = j
            accs = [b.load(p, typ=t) for p, t in zip(ptrs, self.types, strict=True)]
            for k, v in zip(self.item.outputs, reducer.finish(accs), strict=True):
                store_element(kb.ctx, self.spec.output_shapes[k], kb.outputs[k], at, v)
