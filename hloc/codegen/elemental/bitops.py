"""Shifts, count-leading-zeros and popcnt.

Shift amounts are unsigned: an amount >= the bit width (negative ones included) gives 0 for
shift-left / shift-right-logical and the sign fill for shift-right-arithmetic (LLVM's own
shifts are poison there, so the amount is replaced before shifting).
"""

from __future__ import annotations

from llvmlite import ir

from ...ir import Opcode
from .registry import emits
from .scalar import const, elementwise


def _shift(method: str):
    def fn(ctx, instr, v, et):
        b = ctx.builder
        x, amount = v
        width = const(et, et.bits)
        in_range = b.icmp_unsigned("<", amount, width) if et.bits > 1 else \
            b.icmp_unsigned("==", amount, const(et, 0))
        safe = b.select(in_range, amount, const(et, 0))
        shifted = getattr(b, method)(x, safe)
        if method == "ashr":
            saturated = b.ashr(x, const(et, et.bits - 1))
        else:
            saturated = const(et, 0)
        return b.select(in_range, shifted, saturated)

    return fn


emits(Opcode.SHIFT_LEFT)(elementwise({"integral": _shift("shl")}))
emits(Opcode.SHIFT_RIGHT_LOGICAL)(elementwise({"integral": _shift("lshr")}))
emits(Opcode.SHIFT_RIGHT_ARITHMETIC)(elementwise({"integral": _shift("ashr")}))


def _clz(ctx, instr, v, et):
    return ctx.call(f"llvm.ctlz.i{et.bits}", [v[0], ir.Constant(ir.IntType(1), 0)])


def _popcnt(ctx, instr, v, et):
    return ctx.call(f"llvm.ctpop.i{et.bits}", [v[0]])


emits(Opcode.CLZ)(elementwise({"integral": _clz}))
emits(Opcode.POPCNT)(elementwise({"integral": _popcnt}))
