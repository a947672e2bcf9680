"""Windows of convolution, reduce-window and select-and-scatter, target-neutral.

`window_tap` maps an output (window) position and a tap to the input position it reads, with
padding and base-dilation holes reported as invalid; `TapSequence` lists only the taps of a
base-dilated dimension that land on input elements (a transposed convolution's window mostly
falls on holes: with base dilation d only every d-th tap hits an element); `WindowSelector`
emits the pick of one select-and-scatter window. The CPU and CUDA kernels build on them.
"""

from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from ...ir import Instruction
from ...util.record import dataclass
from .compose import emit_scalar_computation
from .types import I1, I64, elem_type


def window_tap(ctx, out_pos, tap, wd, size: int):
    """(valid, input position) of window tap `tap` for output (window) position `out_pos`:
    valid is false on padding and between base-dilated elements; the position is clamped
    into [0, size) so it can always be loaded."""
    b = ctx.builder
    p = b.sub(b.add(b.mul(out_pos, ctx.i64(wd.stride)), b.mul(tap, ctx.i64(wd.window_dilation))),
              ctx.i64(wd.padding_low))
    valid = b.icmp_signed(">=", p, ctx.i64(0))
    if wd.base_dilation > 1:
        step = ctx.i64(wd.base_dilation)
        valid = b.and_(valid, b.icmp_signed("==", b.srem(p, step), ctx.i64(0)))
        p = b.sdiv(p, step)
    valid = b.and_(valid, b.icmp_signed("<", p, ctx.i64(size)))
    p = ctx.call("llvm.smax.i64", [p, ctx.i64(0)])
    return valid, ctx.call("llvm.smin.i64", [p, ctx.i64(max(0, size - 1))])


@dataclass(frozen=True)
class TapSequence:
    """The taps of one base-dilated window dimension that land on input elements, for one
    output position: taps first + j * step for j in [start, stop), tap j reading input
    position base + j * pos_step (in bounds: no tap needs a validity check).

    Tap k reads the dilated input at p = o * stride + k * wdil - pad_low, a real element iff
    d | p (d: base dilation). With g = gcd(wdil, d), that holds iff g | r for
    r = (pad_low - o * stride) mod d, and then k = r/g * (wdil/g)^-1 mod d/g (the inverse
    taken mod d/g): the first such tap is below step = d/g, every step-th tap after it
    qualifies, and each moves the input position by wdil/g. [start, stop) then drops the
    taps on padding at either end."""

    first: ir.Value
    base: ir.Value
    start: ir.Value
    stop: ir.Value
    step: int
    pos_step: int

    @staticmethod
    def of(ctx, out_pos, wd, size: int) -> TapSequence:
        """The sequence of output position `out_pos` along window dimension `wd` of an input
        dimension of `size` elements (before dilation)."""
        b, d = ctx.builder, wd.base_dilation
        g = math.gcd(wd.window_dilation, d)
        step, pos_step = d // g, wd.window_dilation // g
        r = b.srem(b.sub(ctx.i64(wd.padding_low), b.mul(out_pos, ctx.i64(wd.stride))), ctx.i64(d))
        r = b.select(b.icmp_signed("<", r, ctx.i64(0)), b.add(r, ctx.i64(d)), r)  # r mod d >= 0
        first = b.urem(b.mul(b.udiv(r, ctx.i64(g)), ctx.i64(pow(pos_step, -1, step))),
                       ctx.i64(step))
        # first < step, so the numerator is positive: a plain ceiling division.
        count = b.udiv(b.sub(ctx.i64(wd.size + step - 1), first), ctx.i64(step))
        if g > 1:  # no tap at all unless g | r
            count = b.select(b.icmp_unsigned("==", b.urem(r, ctx.i64(g)), ctx.i64(0)), count,
                             ctx.i64(0))
        p = b.sub(b.add(b.mul(out_pos, ctx.i64(wd.stride)),
                        b.mul(first, ctx.i64(wd.window_dilation))), ctx.i64(wd.padding_low))
        base = b.sdiv(p, ctx.i64(d))  # exact where count > 0: d | p
        # 0 <= base + j * pos_step < size  <=>  ceil(-base / ps) <= j < ceil((size - base) / ps)
        start = ceil_div_positive(ctx, b.sub(ctx.i64(0), base), pos_step)
        stop = ceil_div_positive(ctx, b.sub(ctx.i64(size), base), pos_step)
        return TapSequence(first, base, start, ctx.call("llvm.smin.i64", [count, stop]), step,
                           pos_step)

    def tap(self, ctx, j) -> tuple[ir.Value, ir.Value]:
        """(window tap, input position) of the sequence's j-th tap."""
        b = ctx.builder
        return (b.add(self.first, b.mul(j, ctx.i64(self.step))),
                b.add(self.base, b.mul(j, ctx.i64(self.pos_step))))


def ceil_div_positive(ctx, a: ir.Value, n: int) -> ir.Value:
    """ceil(max(a, 0) / n) for a constant n > 0."""
    b = ctx.builder
    a = ctx.call("llvm.smax.i64", [a, ctx.i64(0)])
    return a if n == 1 else b.udiv(b.add(a, ctx.i64(n - 1)), ctx.i64(n))


class WindowSelector:
    """Emits the choice of one select-and-scatter window: which operand element it picks."""

    def __init__(self, ctx, instr: Instruction, operand_gen):
        self.ctx, self.instr, self.gen = ctx, instr, operand_gen
        self.window = instr.attrs.window.dims
        self.shape = instr.operands[0].shape

    def selected(self, s: list[ir.Value]) -> tuple[ir.Value, list[ir.Value]]:
        """(found, operand position) of the element window `s` selects; found is false when
        every tap of the window falls on padding."""
        ctx, b = self.ctx, self.ctx.builder
        have = ctx.alloca(I1)
        pos = [ctx.alloca(I64) for _ in range(self.shape.rank)]
        value_type = elem_type(self.shape.element_type).value_type
        best = ctx.alloca(value_type)
        b.store(ir.Constant(I1, 0), have)
        # Defined before the first tap: select() then never sees an uninitialized value.
        b.store(ir.Constant(value_type, 0), best)
        for slot in pos:
            b.store(ctx.i64(0), slot)
        with contextlib.ExitStack() as stack:
            taps = [stack.enter_context(ctx.loop(0, wd.size, "tap")) for wd in self.window]
            valid, here = ir.Constant(I1, 1), []
            for d, (wd, q) in enumerate(zip(self.window, taps, strict=True)):
                ok, p = window_tap(ctx, s[d], q, wd, self.shape.dims[d])
                valid = b.and_(valid, ok)
                here.append(p)
            stack.enter_context(b.if_then(valid))
            x = self.gen(here)
            cur = b.load(best, typ=value_type)
            keep = emit_scalar_computation(ctx, self.instr.called[0], [cur, x])[0]
            take = b.or_(b.not_(b.load(have, typ=I1)), b.not_(keep))
            with b.if_then(take):
                b.store(x, best)
                b.store(ir.Constant(I1, 1), have)
                for slot, v in zip(pos, here, strict=True):
                    b.store(v, slot)
        return b.load(have, typ=I1), [b.load(p, typ=I64) for p in pos]
