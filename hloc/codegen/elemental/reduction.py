"""Lowerings that loop inside one element: reduce, reduce-window, dot; plus map.

Reducers are inlined scalar computations. A reducer that is a single commutative op of its
two parameters (add, multiply, maximum, minimum, and, or, xor) is applied directly:
float add/multiply carry LLVM's `reassoc` flag so the loop vectorizer may reorder them (as
XLA does; results differ from a sequential sum within float rounding). Narrow floats (f16;
bf16 and f8 reducers are normalized to convert-wrapped f32 ones before codegen) sit in f32
registers; on the CPU they round to their type after every step, as XLA CPU's reducers,
which compute in the element type, do; GPU kernels, summing in another order, keep the f32
accumulator and round once at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Computation, Instruction, Opcode, PrimitiveType
from ...ir.computation import scalar_binary_root
from .complex.arith import multiply
from .complex.values import Cx
from .compose import emit_scalar_computation, flatten, operand_index
from .context import EmitContext, Generator, Index
from .convert import convert_value
from .lowfloat import round_to
from .memory import major_to_minor
from .regions import analyze, window_interior
from .registry import emits
from .scalar import const, contractible, finish, fmax, fmin
from .types import I64, ElemType, elem_type

_SIMPLE = (Opcode.ADD, Opcode.MULTIPLY, Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.AND, Opcode.OR,
           Opcode.XOR)
_F32 = elem_type(PrimitiveType.F32)
# Reductions over at most this many elements unroll completely in code LLVM vectorizes
# (EmitContext.unroll_short), so the loop around them (an output row) is the vectorized one:
# a log-sum-exp over 16 states of an 8 x 16 x 16 array then takes one vector exp per term for
# 16 outputs and one vector log per 16 outputs, instead of a gather, a horizontal sum and a
# scalar log per output. LLVM unrolls such loops by itself only when their body is small (a
# max or a sum of loads, not an exp).
SHORT_REDUCE = 16
# The same for reductions of several operands (an argmin's value and index): each step of
# one output's reduction waits for the last (compares, then selects), so lanes over
# neighbouring outputs pay for longer rows too. An argmax over rows of 32 of a 4096 x 32
# array: 0.47 -> 0.08 ms (k-means' assignment step); rows of 64 gain as much but cost LLVM
# 0.13 s more per kernel (32: 0.02 s).
SHORT_VARIADIC_REDUCE = 32
# The same for reduce-window: windows of at most this many taps (XLA's tree reductions sum
# windows of 32).
SHORT_WINDOW = 32
# Windows at least this long along a dimension, reaching padding, loop over their own taps
# inside the operand only (reduce_window).
BOUNDED_TAPS = 8
# A float sum along a contiguous dimension longer than this runs as a cascade on the CPU:
# chunks of SUM_CHUNK elements into fresh accumulators (LLVM's vector lanes, 32-64 of them,
# each take 64-128), SUM_FAN_IN chunk sums into a second accumulator, those into a third.
# XLA hands such sums to a library whose order is close to pairwise; one running sum per
# lane was 18 x further from the exact sum of 4M values (6 ulp against a third of one) and
# 350 x for a mean of 16M.
SUM_CHUNK = 4096
SUM_FAN_IN = 64


def simple_reducer(comp: Computation) -> Opcode | None:
    """The opcode if `comp` is exactly op(p0, p1) on scalars of one type, else None."""
    root = scalar_binary_root(comp)
    return root.opcode if root is not None and root.opcode in _SIMPLE else None


def _flagged(ctx: EmitContext, instr: ir.Instruction, reassoc: bool = True) -> ir.Instruction:
    """A reassociable accumulation (vector lanes and trees; unless `reassoc` is False),
    contractible where XLA's is."""
    if reassoc:
        instr.flags.append("reassoc")
    return contractible(ctx, instr)


def combine_simple(ctx: EmitContext, op: Opcode, et: ElemType, a: ir.Value,
                   x: ir.Value, reassoc: bool = True) -> ir.Value:
    """a (op) x without rounding narrow floats (the caller rounds once at the end);
    `reassoc`: float sums and products may be reordered (reductions, as XLA's)."""
    b = ctx.builder
    if et.is_complex:
        return _combine_complex(ctx, op, et, a, x, reassoc)
    if et.is_float:
        float_ops = {Opcode.ADD: lambda: _flagged(ctx, b.fadd(a, x), reassoc),
                     Opcode.MULTIPLY: lambda: _flagged(ctx, b.fmul(a, x), reassoc),
                     Opcode.MAXIMUM: lambda: fmax(ctx, a, x),
                     Opcode.MINIMUM: lambda: fmin(ctx, a, x)}
        return float_ops[op]()
    if et.kind == "pred":
        table = {Opcode.ADD: b.or_, Opcode.MULTIPLY: b.and_, Opcode.MAXIMUM: b.or_,
                 Opcode.MINIMUM: b.and_, Opcode.AND: b.and_, Opcode.OR: b.or_, Opcode.XOR: b.xor}
        return table[op](a, x)
    if op in (Opcode.MAXIMUM, Opcode.MINIMUM):
        name = {Opcode.MAXIMUM: "max", Opcode.MINIMUM: "min"}[op]
        prefix = "s" if et.is_signed else "u"
        return ctx.call(f"llvm.{prefix}{name}.i{et.bits}", [a, x])
    table = {Opcode.ADD: b.add, Opcode.MULTIPLY: b.mul, Opcode.AND: b.and_, Opcode.OR: b.or_,
             Opcode.XOR: b.xor}
    return table[op](a, x)


def _combine_complex(ctx: EmitContext, op: Opcode, et: ElemType, a: ir.Value,
                     x: ir.Value, reassoc: bool = True) -> ir.Value:
    """Complex sums add part-wise (reassociable, so they vectorize like float sums)."""
    cx = Cx(ctx, et)
    if op == Opcode.MULTIPLY:
        return multiply(cx, a, x)
    if op != Opcode.ADD:
        raise UnsupportedError(f"a complex reduction cannot use {op.value}")
    (ar, ai), (xr, xi) = cx.parts(a), cx.parts(x)
    return cx.make(_flagged(ctx, cx.b.fadd(ar, xr), reassoc),
                   _flagged(ctx, cx.b.fadd(ai, xi), reassoc))


class Reducer:
    """How accumulators combine with new values; accumulators may be in a wider type."""

    def __init__(self, ctx: EmitContext, comp: Computation, ets: list[ElemType], *,
                 reassoc: bool = True):
        self.ctx, self.comp, self.ets = ctx, comp, ets
        self.reassoc = reassoc
        self.op = simple_reducer(comp) if len(ets) == 1 else None
        # Narrow floats round after every step on the CPU, whose loops follow XLA CPU's order;
        # GPU kernels sum in their own parallel order, where an f32 accumulator stays closer.
        self.round_steps = (self.op is not None and ets[0].is_narrow_float
                            and ctx.target_kind == "cpu")

    def start(self, values: list[ir.Value]) -> list[ir.Value]:
        return values  # narrow floats already sit in f32 registers

    def combine(self, accs: list[ir.Value], values: list[ir.Value]) -> list[ir.Value]:
        if self.op is not None:
            et = self.ets[0]
            value = combine_simple(self.ctx, self.op, et, accs[0], values[0], self.reassoc)
            return [round_to(self.ctx, et, value) if self.round_steps else value]
        return emit_scalar_computation(self.ctx, self.comp, list(accs) + list(values))

    def finish(self, accs: list[ir.Value]) -> list[ir.Value]:
        return [finish(self.ctx, et, a) for et, a in zip(self.ets, accs, strict=True)]


def accumulate_loops(ctx: EmitContext, bounds: list[tuple[ir.Value, ir.Value]],
                     init: list[ir.Value],
                     body: Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]],
                     unroll: bool = False) -> list[ir.Value]:
    """Nested loops (outermost first) carrying accumulators in stack slots (SROA makes phis);
    `unroll`: ask LLVM to unroll them completely (ctx.loop)."""
    b = ctx.builder
    slots = []
    for v in init:
        slot = ctx.alloca(v.type)
        b.store(v, slot)
        slots.append(slot)
    with contextlib.ExitStack() as stack:
        ivs = [stack.enter_context(ctx.loop(lo, hi, "r", unroll=unroll or None))
               for lo, hi in bounds]
        accs = [b.load(s, typ=v.type) for s, v in zip(slots, init, strict=True)]
        for s, v in zip(slots, body(ivs, accs), strict=True):
            b.store(v, s)
    return [b.load(s, typ=v.type) for s, v in zip(slots, init, strict=True)]


@emits(Opcode.REDUCE)
def reduce(ctx: EmitContext, instr: Instruction, gens: list[Generator]) -> Generator:
    n = len(gens) // 2
    inputs, inits = gens[:n], gens[n:]
    in_shape = instr.operands[0].shape
    dims = set(instr.dimensions)
    kept = [d for d in range(in_shape.rank) if d not in dims]
    order = [d for d in major_to_minor(in_shape) if d in dims]
    ets = [elem_type(o.shape.element_type, complex_ok=True) for o in instr.operands[:n]]
    reducer = Reducer(ctx, instr.called[0], ets)
    limit = SHORT_VARIADIC_REDUCE if n > 1 else SHORT_REDUCE
    short = ctx.unroll_short and math.prod(in_shape.dims[d] for d in dims) <= limit

    def generate(index: Index) -> ir.Value:
        full: list[ir.Value] = [ctx.i64(0)] * in_shape.rank
        for d, v in zip(kept, index, strict=True):
            full[d] = v

        def body(ivs, accs):
            for d, v in zip(order, ivs, strict=True):
                full[d] = v
            return reducer.combine(accs, [g(list(full)) for g in inputs])

        start = reducer.start([g([]) for g in inits])
        bounds = [(ctx.i64(0), ctx.i64(in_shape.dims[d])) for d in order]
        if cascade:
            accs = cascade_sum(ctx, reducer, ets[0], bounds, start, body)
        else:
            accs = accumulate_loops(ctx, bounds, start, body, unroll=short)
        out = reducer.finish(accs)
        return tuple(out) if instr.shape.is_tuple else out[0]

    et = ets[0]
    cascade = (ctx.target_kind == "cpu" and not short and reducer.op == Opcode.ADD and n == 1
               and et.is_float and not et.is_complex and not et.is_narrow_float and order
               and order[-1] == major_to_minor(in_shape)[-1]
               and in_shape.dims[order[-1]] > SUM_CHUNK)
    return generate


def cascade_sum(ctx: EmitContext, reducer: Reducer, et: ElemType,
                bounds: list[tuple[ir.Value, ir.Value]], start: list[ir.Value],
                body: Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
    """accumulate_loops for a long float sum whose innermost loop is its contiguous
    dimension (see SUM_CHUNK): that loop in chunks, each summed from -0.0 (the exact
    identity), every SUM_FAN_IN chunk sums flushed from a second accumulator into a third."""
    b = ctx.builder
    zero = ir.Constant(et.value_type, -0.0)
    middle, outer, count = ctx.alloca(et.value_type), ctx.alloca(et.value_type), ctx.alloca(I64)
    for slot, value in ((middle, zero), (outer, zero), (count, ctx.i64(0))):
        b.store(value, slot)
    size = bounds[-1][1].constant  # constant bounds from 0: reduce's own dimensions
    with contextlib.ExitStack() as stack:
        ivs = [stack.enter_context(ctx.loop(lo, hi, "r")) for lo, hi in bounds[:-1]]
        chunk = stack.enter_context(ctx.loop(0, -(-size // SUM_CHUNK), "chunk"))
        first = b.mul(chunk, ctx.i64(SUM_CHUNK))
        last = ctx.call("llvm.smin.i64", [b.add(first, ctx.i64(SUM_CHUNK)), ctx.i64(size)])
        part = accumulate_loops(ctx, [(first, last)], [zero],
                                lambda inner, accs: body(ivs + inner, accs))
        b.store(reducer.combine([b.load(middle, typ=et.value_type)], part)[0], middle)
        counted = b.add(b.load(count, typ=I64), ctx.i64(1))
        full = b.icmp_signed("==", counted, ctx.i64(SUM_FAN_IN))
        with b.if_else(full) as (flush, keep):
            with flush:
                total = reducer.combine([b.load(outer, typ=et.value_type)],
                                        [b.load(middle, typ=et.value_type)])[0]
                b.store(total, outer)
                b.store(zero, middle)
                b.store(ctx.i64(0), count)
            with keep:
                b.store(counted, count)
    rest = reducer.combine([b.load(outer, typ=et.value_type)], [b.load(middle, typ=et.value_type)])
    return reducer.combine(start, rest)


@emits(Opcode.REDUCE_WINDOW)
def reduce_window(ctx: EmitContext, instr: Instruction, gens: list[Generator]) -> Generator:
    n = len(gens) // 2
    inputs, inits = gens[:n], gens[n:]
    in_shape = instr.operands[0].shape
    window = instr.attrs.window.dims
    ets = [elem_type(o.shape.element_type, complex_ok=True) for o in instr.operands[:n]]
    # XLA sums each window tap after tap: no `reassoc`, so neither LLVM's loop vectorizer
    # nor its SLP vectorizer (on an unrolled window: a tree) reorders them.
    reducer = Reducer(ctx, instr.called[0], ets, reassoc=False)
    b = ctx.builder
    out_shape = instr.shape.tuple_shapes[0] if instr.shape.is_tuple else instr.shape
    minor = major_to_minor(out_shape)
    periods = tap_periods(ctx, instr)

    def plan(index: Index) -> tuple[list[bool], bool, list[bool]]:
        """Per dimension, whether every tap of the windows emitted here lies inside the
        operand (for the whole output, or for the index range of a region that the loop
        nest split off at the windows' interior: elemental.regions); whether to unroll; and
        which dimensions loop over their windows' own bounds."""
        inside = [_inside(wd, ctx.value_range(o) or (0, n_out), n_in)
                  for o, wd, n_out, n_in in zip(index, window, out_shape.dims, in_shape.dims,
                                                strict=True)]
        # A short window unrolls, so that the loop vectorized is the output row's (contiguous
        # loads of each tap) rather than the taps' (a gather per tap): a bf16 sum over windows
        # of 32 rows took 6.5 ns an element. Only where the row's own taps never leave the
        # operand: a clamped position would make every tap a gather.
        short = (ctx.unroll_short and math.prod(wd.size for wd in window) <= SHORT_WINDOW
                 and (not minor or inside[minor[-1]]))
        # A looped (not unrolled) dimension whose windows of at least BOUNDED_TAPS reach
        # padding runs only its taps that read the operand: each window's own bounds, no
        # test, no clamp, no select per tap (a cumulative min in windows of 16 with 15
        # padding computed its fused operand 16 times an element, for 8.5 taps on average).
        # Shorter windows keep constant trip counts: LLVM unrolls them and vectorizes the
        # outputs' loop (a 3 x 3 max pool of 128 x 128 with padding: 0.04 ms so, 0.75 ms in
        # bounded loops).
        bounded = [not short and not known and wd.base_dilation == 1 and wd.window_dilation == 1
                   and p == 1 and wd.size >= BOUNDED_TAPS
                   for wd, known, p in zip(window, inside, periods, strict=True)]
        return inside, short, bounded

    def generate(index: Index) -> ir.Value:
        inside, short, bounded = plan(index)

        def body(ivs, accs):
            # A dimension with a residue period steps its loop a period at a time: a copy of
            # the tap per class, in the taps' order.
            taps = [[iv] if p == 1 else [b.add(b.mul(iv, ctx.i64(p)), ctx.i64(r)) for r in range(p)]
                    for iv, p in zip(ivs, periods, strict=True)]
            for ws in itertools.product(*taps):
                accs = tap(list(ws), accs)
            return accs

        def tap(ivs, accs):
            # The taps run where `known` or `ranged` lie inside the operand.
            pos, valid = tap_positions(ctx, index, ivs, window, in_shape.dims,
                                       [not (k or r) for k, r in zip(inside, bounded, strict=True)])
            new = reducer.combine(accs, [g(pos) for g in inputs])
            if valid is None:
                return new
            return [b.select(valid, nv, a) for nv, a in zip(new, accs, strict=True)]

        start = reducer.start([g([]) for g in inits])
        if 0 in in_shape.dims:
            accs = start
        else:
            bounds = [_tap_bounds(ctx, o, wd, size) if ranged else
                      (ctx.i64(0), ctx.i64(wd.size // p))
                      for o, wd, size, p, ranged in zip(index, window, in_shape.dims, periods,
                                                        bounded, strict=True)]
            accs = accumulate_loops(ctx, bounds, start, body, unroll=short)
        out = reducer.finish(accs)
        return tuple(out) if instr.shape.is_tuple else out[0]

    return generate


def tap_positions(ctx: EmitContext, index: Index, taps: Index, window, sizes,
                  checked: list[bool]) -> tuple[list[ir.Value], ir.Value | None]:
    """The operand position of tap `taps` of output `index`'s window, and whether it reads
    the operand rather than padding (None: it does). Only dimensions `checked` are tested
    (and their positions clamped, so that a padding tap reads some element)."""
    b = ctx.builder
    valid = None
    pos = []
    for o, w, wd, size, check in zip(index, taps, window, sizes, checked, strict=True):
        p = b.sub(b.add(b.mul(o, ctx.i64(wd.stride)), b.mul(w, ctx.i64(wd.window_dilation))),
                  ctx.i64(wd.padding_low))
        if not check:
            pos.append(p)
            continue
        tests = []
        if wd.base_dilation > 1:
            step = ctx.i64(wd.base_dilation)
            tests.append(b.icmp_signed("==", b.srem(p, step), ctx.i64(0)))
            p = b.sdiv(p, step)
        tests += [b.icmp_signed(">=", p, ctx.i64(0)), b.icmp_signed("<", p, ctx.i64(size))]
        for t in tests:
            valid = t if valid is None else b.and_(valid, t)
        pos.append(_clamp(ctx, p, size))
    return pos, valid


def _tap_bounds(ctx: EmitContext, o: ir.Value, wd, size: int) -> tuple[ir.Value, ir.Value]:
    """[lo, hi) of the taps of output o's window that read the operand (dilation 1): position
    o * stride + t - padding_low in [0, size)."""
    b = ctx.builder
    shift = b.sub(ctx.i64(wd.padding_low), b.mul(o, ctx.i64(wd.stride)))
    lo = ctx.call("llvm.smax.i64", [shift, ctx.i64(0)])
    hi = ctx.call("llvm.smin.i64", [b.add(shift, ctx.i64(size)), ctx.i64(wd.size)])
    return lo, hi


def tap_periods(ctx: EmitContext, instr: Instruction) -> list[int]:
    """Per window dimension, the residue period its taps run in (1: none): where interior
    padding below interleaves along it (an associative scan's down-sweep summed in windows;
    elemental.regions), a period that divides the window's size and stride, so that every
    tap's residue is known, the largest such dimension only; none in small kernels."""
    window = instr.attrs.window.dims
    periods = [1] * len(window)
    if not ctx.unroll_short:
        return periods
    n = len(instr.operands) // 2
    found = analyze(instr.operands[:n], len(window)).periods
    best = max(range(len(window)), key=lambda d: math.gcd(found[d], window[d].size,
                                                            window[d].stride))
    wd = window[best]
    if wd.base_dilation == 1:
        periods[best] = math.gcd(found[best], wd.size, wd.stride)
    return periods


def _inside(wd, outputs: tuple[int, int], n_in: int) -> bool:
    """Whether every tap of the windows of outputs [lo, hi) along one dimension reads the
    operand itself (no padding, no dilation holes): its position needs no test and no clamp."""
    lo, hi = outputs
    if wd.base_dilation != 1 or hi <= lo:
        return False
    first, end = window_interior(wd, n_in)
    return first <= lo and hi <= end


def _clamp(ctx: EmitContext, v: ir.Value, size: int) -> ir.Value:
    v = ctx.call("llvm.smax.i64", [v, ctx.i64(0)])
    return ctx.call("llvm.smin.i64", [v, ctx.i64(max(0, size - 1))])


@emits(Opcode.MAP)
def map_(ctx: EmitContext, instr: Instruction, gens: list[Generator]) -> Generator:
    comp = instr.called[0]

    def generate(index: Index) -> ir.Value:
        values = [g(operand_index(instr, i, index)) for i, g in enumerate(gens)]
        return flatten(emit_scalar_computation(ctx, comp, values))[0]

    return generate


# ---- dot ---------------------------------------------------------------------------------------------

def _dot_compute_type(ets: list[ElemType]) -> ElemType:
    if any(e.is_complex for e in ets):
        wide = any(e.bits == (128 if e.is_complex else 64) for e in ets if e.is_complex or e.is_float)
        return elem_type(PrimitiveType.C128 if wide else PrimitiveType.C64, complex_ok=True)
    if any(e.is_float and e.bits == 64 for e in ets):
        return elem_type(PrimitiveType.F64)
    if any(e.is_float for e in ets):
        return _F32
    if all(e.kind != "int" for e in ets) and any(e.kind == "uint" for e in ets):
        return elem_type(PrimitiveType.U64)
    return elem_type(PrimitiveType.S64)


def _dot_operand_indices(ctx: EmitContext, index: Index, lhs_rank: int, rhs_rank: int, dims):
    """Split an output index (batch, lhs free, rhs free) into operand indices."""
    lb, rb, lf, rf = dims
    li: list[ir.Value] = [ctx.i64(0)] * lhs_rank
    ri: list[ir.Value] = [ctx.i64(0)] * rhs_rank
    pos = iter(index)
    for dl, dr in zip(lb, rb, strict=True):
        li[dl] = ri[dr] = next(pos)
    for d in lf:
        li[d] = next(pos)
    for d in rf:
        ri[d] = next(pos)
    return li, ri


def _product(ctx: EmitContext, et: ElemType, x: ir.Value, y: ir.Value) -> ir.Value:
    if et.is_complex:
        return combine_simple(ctx, Opcode.MULTIPLY, et, x, y)
    return contractible(ctx, ctx.builder.fmul(x, y)) if et.is_float else ctx.builder.mul(x, y)


@emits(Opcode.DOT)
def dot(ctx: EmitContext, instr: Instruction, gens: list[Generator]) -> Generator:
    """out[batch, lhs-free, rhs-free] = sum over contracting dims (a loop per element)."""
    lhs_gen, rhs_gen = gens
    dn = instr.attrs.dot_dnums
    lhs, rhs = instr.operands[0].shape, instr.operands[1].shape
    lb, lc = list(dn.lhs_batch_dimensions), list(dn.lhs_contracting_dimensions)
    rb, rc = list(dn.rhs_batch_dimensions), list(dn.rhs_contracting_dimensions)
    lf = [d for d in range(lhs.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.rank) if d not in rb and d not in rc]
    out_et = elem_type(instr.shape.element_type, complex_ok=True)
    l_et = elem_type(lhs.element_type, complex_ok=True)
    r_et = elem_type(rhs.element_type, complex_ok=True)
    cet = _dot_compute_type([l_et, r_et, out_et])
    b = ctx.builder

    def generate(index: Index) -> ir.Value:
        li, ri = _dot_operand_indices(ctx, index, lhs.rank, rhs.rank, (lb, rb, lf, rf))

        def body(ivs, accs):
            for dl, dr, v in zip(lc, rc, ivs, strict=True):
                li[dl] = ri[dr] = v
            if out_et.kind == "pred":
                x = convert_value(ctx, l_et, out_et, lhs_gen(list(li)))
                y = convert_value(ctx, r_et, out_et, rhs_gen(list(ri)))
                return [b.or_(accs[0], b.and_(x, y))]
            x = convert_value(ctx, l_et, cet, lhs_gen(list(li)))
            y = convert_value(ctx, r_et, cet, rhs_gen(list(ri)))
            return [combine_simple(ctx, Opcode.ADD, cet, accs[0], _product(ctx, cet, x, y))]

        acc_et = out_et if out_et.kind == "pred" else cet
        bounds = [(ctx.i64(0), ctx.i64(lhs.dims[d])) for d in lc]
        (acc,) = accumulate_loops(ctx, bounds, [const(acc_et, 0)], body)
        return acc if out_et.kind == "pred" else convert_value(ctx, cet, out_et, acc)

    return generate
