"""select-and-scatter as a gather: each output element collects the sources that pick it.

Output element x starts at the init value. For every window s that covers x (visited in
row-major order of s, the order XLA applies the scatter computation in), the window's
selected position is recomputed — taps in row-major order, skipping padding, a tap replacing
the current choice when select(current, tap) is false — and if it is x, source[s] is
combined in. No two threads write the same element, so no atomics are needed. The window's
choice is hloc/codegen/cpu/selscatter.py's WindowSelector, shared with the CPU kernel.
"""

from __future__ import annotations

import contextlib

from llvmlite import ir

from ...ir import Instruction, Opcode
from ..elemental.compose import emit_scalar_computation
from ..elemental.registry import emits
from ..elemental.types import I1
from ..elemental.windows import WindowSelector


def _covering(ctx, x_pos, wd, size_src: int, tap):
    """(valid, window index s) of the window whose tap `tap` lands on input position x."""
    b = ctx.builder
    num = b.sub(b.add(b.mul(x_pos, ctx.i64(wd.base_dilation)), ctx.i64(wd.padding_low)),
                b.mul(tap, ctx.i64(wd.window_dilation)))
    step = ctx.i64(wd.stride)
    valid = b.icmp_signed(">=", num, ctx.i64(0))
    valid = b.and_(valid, b.icmp_signed("==", b.srem(num, step), ctx.i64(0)))
    s = b.sdiv(num, step)
    valid = b.and_(valid, b.icmp_signed("<", s, ctx.i64(size_src)))
    return valid, ctx.call("llvm.smin.i64", [ctx.call("llvm.smax.i64", [s, ctx.i64(0)]),
                                             ctx.i64(max(0, size_src - 1))])


@emits(Opcode.SELECT_AND_SCATTER, target="cuda")
def select_and_scatter(ctx, instr: Instruction, gens):
    operand_gen, source_gen, init_gen = gens
    window = instr.attrs.window.dims
    source = instr.operands[1].shape
    b = ctx.builder

    def generate(index):
        acc = ctx.alloca(init_gen([]).type)
        b.store(init_gen([]), acc)
        with contextlib.ExitStack() as stack:
            valid, s = ir.Constant(I1, 1), []
            for d, wd in enumerate(window):
                q = stack.enter_context(ctx.loop(0, wd.size, "q"))
                q = b.sub(ctx.i64(wd.size - 1), q)  # descending taps: ascending windows
                ok, sd = _covering(ctx, index[d], wd, source.dims[d], q)
                valid = b.and_(valid, ok)
                s.append(sd)
            stack.enter_context(b.if_then(valid))
            found, pos = WindowSelector(ctx, instr, operand_gen).selected(s)
            mine = found
            for p, x in zip(pos, index, strict=True):
                mine = b.and_(mine, b.icmp_signed("==", p, x))
            with b.if_then(mine):
                cur = b.load(acc, typ=init_gen([]).type)
                new = emit_scalar_computation(ctx, instr.called[1], [cur, source_gen(s)])[0]
                b.store(new, acc)
        return b.load(acc, typ=init_gen([]).type)

    return generate
