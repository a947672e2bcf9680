"""Windows of convolution, reduce-window and select-and-scatter, target-neutral.

`window_tap` maps an output (window) position and a tap to the input position it reads, with
padding and base-dilation holes reported as invalid; `WindowSelector` emits the pick of one
select-and-scatter window. The CPU and CUDA kernels build on both.
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...ir import Instruction
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
