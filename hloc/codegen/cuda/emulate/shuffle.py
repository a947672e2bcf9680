"""Warp shuffles as an exchange through a per-block buffer of 32-bit slots (one per thread).

Phase 1 stores the thread's value in its slot; phase 2 reads the slot of the source lane
that PTX `shfl.sync` names: with lane = linear thread id mod 32, c = clamp operand,
segmask = (c >> 8) & 31, max = (lane & segmask) | (c & 31 & ~segmask):
down: j = lane + b, valid if j <= max; up: j = lane - b, valid if j >= lane & segmask;
bfly: j = lane ^ b, valid if j <= max; idx: j = (lane & segmask) | (b & ~segmask), valid if
j <= max. An invalid (or missing) source lane yields the thread's own value.
"""

from __future__ import annotations

from llvmlite import ir

from ...elemental.types import I32, I64


def linear_thread(t) -> ir.Value:
    """tid.x + ntid.x * (tid.y + ntid.y * tid.z), computed once in the dispatch block."""
    cached = getattr(t, "_linear_tid", None)
    if cached is None:
        b, a = t.b, t.arg
        with b.goto_block(t.dispatch):
            yz = b.add(a["tid.y"], b.mul(a["ntid.y"], a["tid.z"]))
            cached = b.add(a["tid.x"], b.mul(a["ntid.x"], yz), name="emu.tid")
            count = b.mul(a["ntid.x"], b.mul(a["ntid.y"], a["ntid.z"]), name="emu.nthreads")
        t._linear_tid, t._thread_count = cached, count
    return cached


def _slot(t, thread: ir.Value) -> ir.Value:
    return t.b.gep(t.arg["exchange"], [t.b.zext(thread, I64)], inbounds=True, source_etype=I32)


def emit_exchange_write(t, value: ir.Value) -> None:
    b = t.b
    bits = b.bitcast(value, I32) if value.type != I32 else value
    b.store(bits, _slot(t, linear_thread(t)))


def _source_lane(b, mode: str, lane, operand, clamp):
    c31 = ir.Constant(I32, 31)
    segmask = b.and_(b.lshr(clamp, ir.Constant(I32, 8)), c31)
    low = b.and_(lane, segmask)
    high = b.or_(low, b.and_(b.and_(clamp, c31), b.not_(segmask)))
    if mode == "down":
        j = b.add(lane, operand)
        return j, b.icmp_signed("<=", j, high)
    if mode == "up":
        j = b.sub(lane, operand)
        return j, b.icmp_signed(">=", j, low)
    if mode == "bfly":
        j = b.xor(lane, operand)
        return j, b.icmp_signed("<=", j, high)
    j = b.or_(low, b.and_(operand, b.not_(segmask)))
    return j, b.icmp_signed("<=", j, high)


def emit_exchange_read(t, mode: str, ty: ir.Type, operand, clamp) -> ir.Value:
    b = t.b
    me = linear_thread(t)
    lane = b.and_(me, ir.Constant(I32, 31))
    j, valid = _source_lane(b, mode, lane, operand, clamp)
    source = b.add(b.sub(me, lane), j)
    exists = b.icmp_unsigned("<", source, t._thread_count)
    source = b.select(b.and_(valid, exists), source, me)
    bits = b.load(_slot(t, source), typ=I32)
    return b.bitcast(bits, ty) if ty != I32 else bits
