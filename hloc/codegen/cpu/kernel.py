"""One CPU kernel: the ABI wrapper, the body function and its segments.

A kernel is a sequence of segments (a loop nest over some outputs, a column reduction, an
in-place update, ...). Each has its own number of work units; the kernel's unit space is their
concatenation, so one [begin, end) range may cover parts of several segments.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from llvmlite import ir

from ...errors import UnsupportedError
from ...ir import Instruction, Opcode
from ...registry import Registry
from ...util.record import dataclass
from ..elemental import computation_generators
from ..elemental.context import EmitContext
from ..elemental.memory import ArrayGenerator
from ..elemental.types import I64, PTR
from ..roots import RootItem
from ..roots import root_items as computation_root_items
from ..target import enter_flush_to_zero, leave_flush_to_zero
from .kernel_spec import KernelInfo, KernelSpec


@dataclass
class KernelBuild:
    """Everything a segment needs while emitting the body."""

    ctx: EmitContext
    spec: KernelSpec
    operands: list[ir.Value]
    outputs: list[ir.Value]
    gens: dict[int, Callable]

    def gen(self, instr: Instruction):
        return self.gens[id(instr)]


class Segment:
    """A part of a kernel with `extent` independent work units."""

    kind = "segment"
    extent = 0

    def emit(self, kb: KernelBuild, lo: ir.Value, hi: ir.Value) -> None:
        raise NotImplementedError


# Special segment planners by root opcode: fn(spec, item) -> Segment | None (None: plain loop),
# registered with `@special_segment(Opcode.X)` by the modules listed here.
SPECIAL_SEGMENTS: Registry[Opcode, Callable] = Registry("CPU kernel segment", modules=tuple(
    f"hloc.codegen.cpu.{name}" for name in (
        "conv", "custom_calls", "dot", "fft", "inplace", "reduce", "reduce_window",
        "selscatter", "sort", "topk", "transpose")))
special_segment = SPECIAL_SEGMENTS.register


def root_items(spec: KernelSpec) -> list[RootItem]:
    items = computation_root_items(spec.computation)
    next_output = sum(len(item.outputs) for item in items)
    if next_output != len(spec.output_shapes):
        raise UnsupportedError(f"kernel {spec.name}: root has {next_output} leaves but "
                               f"{len(spec.output_shapes)} outputs were given")
    return items


def plan_segments(spec: KernelSpec) -> list[Segment]:
    from .loops import LoopSegment

    segments: list[Segment] = []
    loops: dict[tuple, LoopSegment] = {}
    items = root_items(spec)
    plain: list[RootItem] = []
    for item in items:
        planner = SPECIAL_SEGMENTS.get(item.instr.opcode)
        special = planner(spec, item) if planner is not None else None
        if special is None:
            from .reduce import plan_epilogue

            special = plan_epilogue(spec, item)
        if special is not None:
            segments.append(special)
        else:
            plain.append(item)
    # A special segment may compute other items too (an in-place update the value it copies).
    taken = {i.outputs for seg in segments for i in getattr(seg, "also", ())}
    for item in plain:
        if item.outputs in taken:
            continue
        shapes = [spec.output_shapes[k] for k in item.outputs]
        key = tuple((s.dims, s.layout) for s in shapes[:1])
        if key in loops and all(s.dims == shapes[0].dims for s in shapes):
            loops[key].add(item, spec)
            continue
        loop = LoopSegment(item, spec)
        loops[key] = loop
        segments.append(loop)
    return segments


# ---- functions --------------------------------------------------------------------------------

def emit_kernel(module: ir.Module, spec: KernelSpec, target, *,
                vectorized: bool = True, unroll: bool = True) -> KernelInfo:
    """Emit kernel `spec.name` (and its body) into `module`; `vectorized`: whether LLVM will
    vectorize it (EmitContext.unroll_short); `unroll=False`: its loops ask LLVM not to unroll
    them (EmitContext.unroll_loops)."""
    segments = plan_segments(spec)
    body = _emit_body(module, spec, target, segments, vectorized, unroll)
    _emit_wrapper(module, spec, target, body)
    extent = sum(s.extent for s in segments)
    return KernelInfo(spec.name, extent, len(spec.operand_shapes), len(spec.output_shapes),
                      tuple(s.kind for s in segments), spec.instruction_names)


def _aliased_buffers(spec: KernelSpec) -> set[int]:
    """Buffer indices that may not be noalias: both sides of every alias pair that
    `_shared_outputs` cannot fold into one pointer."""
    n = len(spec.operand_shapes)
    shared = _shared_outputs(spec)
    out: set[int] = set()
    for out_index, operand_index in spec.aliases:
        if shared.get(out_index) != operand_index:
            out.update((operand_index, n + out_index))
    return out


def _shared_outputs(spec: KernelSpec) -> dict[int, int]:
    """output -> operand for outputs that alias exactly one operand, which aliases no other
    output. The body then reads and writes such a buffer through the operand's pointer
    alone, so LLVM sees one base pointer: an in-place elementwise loop (read x[i], write
    x[i]) vectorizes without run-time overlap checks, which an exact overlap of two distinct
    pointers always fails (the loop then ran scalar). Nothing else touches that memory, so
    the operand's pointer stays noalias."""
    by_output: dict[int, list[int]] = {}
    by_operand: dict[int, list[int]] = {}
    for out_index, operand_index in spec.aliases:
        by_output.setdefault(out_index, []).append(operand_index)
        by_operand.setdefault(operand_index, []).append(out_index)
    return {k: ops[0] for k, ops in by_output.items()
            if len(ops) == 1 and len(by_operand[ops[0]]) == 1}


def _emit_body(module, spec: KernelSpec, target, segments: list[Segment],
               vectorized: bool, unroll: bool = True) -> ir.Function:
    n_buffers = len(spec.operand_shapes) + len(spec.output_shapes)
    fnty = ir.FunctionType(ir.VoidType(), [PTR] * n_buffers + [I64, I64])
    fn = ir.Function(module, fnty, f"{spec.name}.body")
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    add_denormal_mode(fn)
    aliased = _aliased_buffers(spec)
    for i, arg in enumerate(fn.args[:n_buffers]):
        # noalias lets LLVM vectorize without run-time overlap checks; the buffer assignment
        # shares an operand's buffer with an output only where the kernel says so (aliases).
        if i not in aliased:
            arg.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    # f16 rounds with F16C's vcvtps2ph where the target has it (it ignores FTZ: tiny results
    # stay subnormal; a gelu epilogue's chain of f16 ops 4.3 -> 3.1 ms on 512 x 1024, about
    # 30 integer instructions a rounding before), and decodes with integer code: under the
    # kernels' denormal mode LLVM may fold f16 denormals met by fpext into zero.
    ctx = EmitContext(module, builder, target, prefix=spec.name, native_half=_has(target, "f16c"),
                      unroll_short=vectorized, unroll_loops=unroll)
    n_ops = len(spec.operand_shapes)
    operands, outputs = list(fn.args[:n_ops]), list(fn.args[n_ops:n_buffers])
    for out_index, operand_index in _shared_outputs(spec).items():
        outputs[out_index] = operands[operand_index]
    params = [ArrayGenerator(ctx, shape, ptr) for shape, ptr in zip(spec.operand_shapes, operands,
                                                                     strict=True)]
    gens = computation_generators(ctx, spec.computation, params)
    kb = KernelBuild(ctx, spec, operands, outputs, gens)
    begin, end = fn.args[n_buffers], fn.args[n_buffers + 1]
    offset = 0
    for seg in segments:
        _emit_segment_range(kb, seg, begin, end, offset)
        offset += seg.extent
    builder.ret_void()
    return fn


def _emit_segment_range(kb: KernelBuild, seg: Segment, begin, end, offset: int) -> None:
    """Run the part of [begin, end) that falls in this segment's units [offset, offset+extent)."""
    if seg.extent == 0:
        return
    ctx, b = kb.ctx, kb.ctx.builder
    lo = ctx.call("llvm.smax.i64", [b.sub(begin, ctx.i64(offset)), ctx.i64(0)])
    hi = ctx.call("llvm.smin.i64", [b.sub(end, ctx.i64(offset)), ctx.i64(seg.extent)])
    with b.if_then(b.icmp_signed("<", lo, hi)):
        seg.emit(kb, lo, hi)


def _emit_wrapper(module, spec: KernelSpec, target, body: ir.Function) -> None:
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64]), spec.name)
    fn.attributes.add("nounwind")
    add_denormal_mode(fn)
    buffers, begin, end = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    ctx = EmitContext(module, b, target, prefix=spec.name)
    n = len(spec.operand_shapes) + len(spec.output_shapes)
    ptrs = [b.load(b.gep(buffers, [ctx.i64(i)], inbounds=True, source_etype=PTR), typ=PTR)
            for i in range(n)]
    x86 = getattr(target, "is_x86", False)
    saved = enter_flush_to_zero(ctx) if x86 else None
    b.call(body, ptrs + [begin, end])
    if saved is not None:
        leave_flush_to_zero(ctx, saved)
    b.ret_void()


# Tells LLVM that denormal inputs and outputs may read/become ±0 (the kernels run with
# FTZ/DAZ): without it LLVM rewrites bit tests into float compares that DAZ then breaks.
DENORMAL_MODE = '"denormal-fp-math"="preserve-sign,preserve-sign"'


def _has(target, feature: str) -> bool:
    has = getattr(target, "has", None)
    return bool(has and has(feature))


def add_denormal_mode(fn: ir.Function) -> None:
    # llvmlite only validates the names of enum attributes; string attributes go in as text.
    set.add(fn.attributes, DENORMAL_MODE)


def prod(values) -> int:
    return math.prod(values)
