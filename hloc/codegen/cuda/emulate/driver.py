"""Host launch functions for emulated kernels: loops over blocks and threads, in IR.

`i32 emu.launch.K(ptr args, ptr dims, ptr frames, ptr shared, ptr exchange, ptr states,
i64 block_begin, i64 block_end)` runs blocks [block_begin, block_end) of the grid
(`dims` = i32 gx, gy, gz, bx, by, bz). A kernel without synchronization points runs each
thread once. Otherwise, per block, every still-running thread runs its next phase before any
thread runs the one after; all threads must stop at the same point (a barrier or shuffle
reached by the whole block) or all finish. Return codes: 0 ok, 1 threads of a block stopped
at different synchronization points, 2 some threads finished while others wait at one.

Floating point runs with FTZ/DAZ (x86 MXCSR), the reference's denormal behaviour.
"""

from __future__ import annotations

from llvmlite import ir

from ...elemental.context import EmitContext
from ...elemental.indexing import delinearize
from ...elemental.types import I32, I64, PTR
from ...target import enter_flush_to_zero, leave_flush_to_zero
from .transform import DENORMALS, DONE, EmulatedKernel

OK, DIVERGED, EXITED_AT_SYNC = 0, 1, 2


def launch_name(kernel: str) -> str:
    return f"emu.launch.{kernel}"


def emit_launch(module: ir.Module, info: EmulatedKernel, x86: bool) -> None:
    fnty = ir.FunctionType(I32, [PTR] * 6 + [I64, I64])
    fn = ir.Function(module, fnty, launch_name(info.name))
    fn.attributes.add("nounwind")
    # The same denormal mode as the kernel, so LLVM inlines it without changing its meaning.
    set.add(fn.attributes, DENORMALS)
    args, dims, frames, shared, exchange, states, begin, end = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = EmitContext(module, b, None, prefix=info.step)
    d = [b.load(b.gep(dims, [ctx.i64(i)], source_etype=I32), typ=I32) for i in range(6)]
    saved = enter_flush_to_zero(ctx) if x86 else None
    status = ctx.alloca(I32)
    b.store(ir.Constant(I32, OK), status)
    step = module.globals[info.step]
    common = (d, frames, shared, exchange, args, info.frame_bytes)
    with ctx.loop(begin, end, "block") as block:
        ctaid = _delinearize(b, block, d[0:3])
        if info.sync_points == 0:
            _run_once(ctx, step, ctaid, common)
        else:
            _run_phases(ctx, step, ctaid, states, status, common)
    if saved is not None:
        leave_flush_to_zero(ctx, saved)
    b.ret(b.load(status, typ=I32))


def _delinearize(b, linear64, grid: list[ir.Value]) -> list[ir.Value]:
    """(x, y, z) of a linear block or thread number in a grid of run-time sizes (x, y, z)."""
    return delinearize(b, b.trunc(linear64, I32), grid[::-1])[::-1]


def _call_step(ctx, step, frame, state, tid, ctaid, common) -> ir.Value:
    d, _, shared, exchange, args, _ = common
    return ctx.builder.call(step, [frame, state] + tid + d[3:6] + ctaid + d[0:3]
                            + [shared, exchange, args])


def _thread_count(b, d) -> ir.Value:
    return b.zext(b.mul(d[3], b.mul(d[4], d[5])), I64)


def _run_once(ctx, step, ctaid, common) -> None:
    b = ctx.builder
    d, frames = common[0], common[1]
    with ctx.loop(0, _thread_count(b, d), "thread") as t:
        tid = _delinearize(b, t, d[3:6])
        _call_step(ctx, step, frames, ir.Constant(I32, 0), tid, ctaid, common)


def _run_phases(ctx, step, ctaid, states, status, common) -> None:
    b = ctx.builder
    d, frames, frame_bytes = common[0], common[1], common[5]
    n = _thread_count(b, d)
    with ctx.loop(0, n, "init") as t:
        b.store(ir.Constant(I32, 0), b.gep(states, [t], source_etype=I32))
    waiting, finished, point = (ctx.alloca(I32) for _ in range(3))
    head = b.append_basic_block("phase")
    after = b.append_basic_block("phases.done")
    b.branch(head)
    b.position_at_end(head)
    for slot, v in ((waiting, 0), (finished, 0), (point, -2)):
        b.store(ir.Constant(I32, v), slot)
    with ctx.loop(0, n, "thread") as t:
        state_ptr = b.gep(states, [t], source_etype=I32)
        state = b.load(state_ptr, typ=I32)
        with b.if_then(b.icmp_signed("!=", state, ir.Constant(I32, DONE))):
            frame = b.gep(frames, [b.mul(t, ctx.i64(frame_bytes))], source_etype=ir.IntType(8))
            tid = _delinearize(b, t, d[3:6])
            r = _call_step(ctx, step, frame, state, tid, ctaid, common)
            b.store(r, state_ptr)
            _tally(ctx, r, waiting, finished, point, status)
    w = b.load(waiting, typ=I32)
    exited = b.and_(b.icmp_signed(">", w, ir.Constant(I32, 0)),
                    b.icmp_signed(">", b.load(finished, typ=I32), ir.Constant(I32, 0)))
    with b.if_then(exited):
        b.store(ir.Constant(I32, EXITED_AT_SYNC), status)
    again = b.and_(b.icmp_signed(">", w, ir.Constant(I32, 0)),
                   b.icmp_signed("==", b.load(status, typ=I32), ir.Constant(I32, OK)))
    b.cbranch(again, head, after)
    b.position_at_end(after)


def _tally(ctx, r, waiting, finished, point, status) -> None:
    b = ctx.builder
    one = ir.Constant(I32, 1)
    is_done = b.icmp_signed("==", r, ir.Constant(I32, DONE))
    with b.if_else(is_done) as (done, stopped):
        with done:
            b.store(b.add(b.load(finished, typ=I32), one), finished)
        with stopped:
            b.store(b.add(b.load(waiting, typ=I32), one), waiting)
            p = b.load(point, typ=I32)
            fresh = b.icmp_signed("==", p, ir.Constant(I32, -2))
            b.store(b.select(fresh, r, p), point)
            with b.if_then(b.and_(b.not_(fresh), b.icmp_signed("!=", p, r))):
                b.store(ir.Constant(I32, DIVERGED), status)
